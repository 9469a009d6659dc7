"""PostgreSQL only: a processor webhook that moves a payment, in one call (ADR 0026 step 3).

A `charge.succeeded` or `charge.failed` event for a payment still `processing` (the processor
answered `pending`) or `in_doubt` (its answer was lost) settles it. The reference path
(`inbound.service.receive`) stores the event, reads the payment FOR UPDATE, moves it (the
compare-and-set, the hold posted or voided with its accounts and entries, the state event),
records the event on the payment's audit log and sets the stored event's status: a dozen
statements and a commit.

- `paycore_payments_settle` gains a last argument, a declined authorization's lifetime (the
  processor's decline of a `capture: manual` charge names it, and the payment keeps it): 0030's
  body as a new signature (a function's arguments cannot change in place), with two parts made
  optional, so that a webhook's move is written by the one home of a settle's rules rather than
  a copy: the call's event is written only when its id (`p_event_ids[1]`) is not NULL (a webhook
  has no call), and the key's answer only when `p_response_status` is not NULL (a webhook's
  payment was answered when the processor said `pending` or the answer was lost); the lifetime
  is written when given. 0030's signature is replaced (CREATE OR REPLACE) by a one-line call of
  the new one without a lifetime, so the release before (which calls it, with a call and an
  answer) writes exactly what it wrote.
- `paycore_inbound_apply`, new: the event stored (`applied`, tried once, done; a redelivery
  writes nothing and answers `duplicate`), the creating request's answer checked recorded (else
  SQLSTATE PC013: the reference path writes it), `paycore_payments_settle` called with neither a
  call nor an answer (no row back: the payment moved first, PC013), the event on the payment's
  audit log (`applied`). PC013 and the settle's refusals (PC001-PC004) undo the whole call, and
  the caller takes the reference path. The reference path's lock order: the stored event's key,
  the payment's row (the settle's compare-and-set), the hold's resolution, its accounts in id
  order. Every statement filters by `p_tenant_id`, its first argument.

This release calls the new functions (a payment's settle too, by its new signature) and falls
back to the reference path where they do not exist yet (SQLSTATE 42883: below 0039 every settle
on PostgreSQL is the reference path's, as before 0030), so OLDEST_COMPATIBLE_REVISION stays 0035.
Downgrade drops the new functions and puts 0030's body back under its signature. SQLite:
nothing (its statements are `paycore.inbound.apply_repository`'s and
`paycore.payments.settle_repository`'s).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-06 14:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None

_SETTLE_0030 = (
    "paycore_payments_settle(text, text, text, bigint, text, text, text, text, bigint, text, text, boolean, text,"
    " text[], text[], text[], text[], text, text, text, text, integer, text)"
)
_SETTLE_ARGUMENTS_0030 = 23
_SETTLE = _SETTLE_0030[:-1] + ", bigint)"
_APPLY = (
    "paycore_inbound_apply(text, text, text, text, text, text, text, text, bigint, text, text, text, bigint, text,"
    " text, boolean, text, text[], text, text, text, text, text, text, text, text, text, text)"
)

_CALL_EVENT_0030 = """    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);
"""
_ANSWER_0030 = """    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % was recorded already', p_key USING ERRCODE = 'PC004';
    END IF;
"""


def _revision_0030_body() -> str:
    """Revision 0030's function (history: that file never changes)."""
    path = Path(__file__).with_name("0030_payments_settle.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0030", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._CREATE)


def _replaced_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _indented(block: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in block.splitlines(keepends=True))


def _settle_0039() -> str:
    """0030's body under the new signature: the call's event and the key's answer each written
    only when given, the authorization's lifetime written when given."""
    body = _replaced_once(
        _revision_0030_body(),
        "    p_response_body text\n) RETURNS TABLE",
        "    p_response_body text,\n    -- a declined authorization's lifetime, as the processor's answer names it (0039)\n"
        "    p_authorization_expires_at_us bigint\n) RETURNS TABLE",
    )
    body = _replaced_once(
        body,
        "claimed_by = NULL, claimed_until_us = NULL\n",
        "claimed_by = NULL, claimed_until_us = NULL,\n"
        "        authorization_expires_at_us = coalesce(p_authorization_expires_at_us, authorization_expires_at_us)\n",
    )
    body = _replaced_once(
        body,
        _CALL_EVENT_0030,
        "    IF p_event_ids[1] IS NOT NULL THEN  -- a webhook's move has no call (0039)\n"
        f"{_indented(_CALL_EVENT_0030)}    END IF;\n",
    )
    return _replaced_once(
        body,
        _ANSWER_0030,
        "    IF p_response_status IS NOT NULL THEN  -- a webhook's payment was answered before (0039)\n"
        f"{_indented(_ANSWER_0030)}    END IF;\n",
    )


_CREATE_APPLY = """
CREATE FUNCTION paycore_inbound_apply(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    -- the payment's move, as paycore_payments_settle takes it (without a call or an answer)
    p_payment_id text,
    p_key text,
    p_expected_status text,
    p_now_us bigint,
    p_status text,
    p_failure_code text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_transfer_id text,
    p_destination_account_id text,
    p_post boolean,
    p_resolution_id text,
    p_entry_ids text[],
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text,
    -- the event on the payment's audit log (its data as paycore.audit encodes it), its cause p_result
    p_audit_event_id text,
    p_audit_type text,
    p_audit_data text,
    p_result text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    moved integer;
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payment_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    PERFORM 1 FROM idempotency_keys
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % is not recorded: the webhook would write it', p_key
            USING ERRCODE = 'PC013';
    END IF;

    SELECT count(*) INTO moved FROM paycore_payments_settle(p_tenant_id, p_payment_id, p_key, p_now_us,
        p_expected_status, p_status, p_failure_code, p_processor_reference, p_amount_minor, p_transfer_id,
        p_destination_account_id, p_post, p_resolution_id, p_entry_ids, ARRAY[NULL, p_state_event_id],
        ARRAY[NULL, p_state_type], ARRAY[NULL, p_state_cause], p_actor, NULL, p_state_data, p_snapshot, NULL,
        NULL, NULL);
    IF moved = 0 THEN
        RAISE EXCEPTION 'payment % is not % any more', p_payment_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payment', p_payment_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""


def _settle_0030_calls_the_new() -> str:
    """0030's signature, replaced by a call of the new one without a lifetime: the release
    before (which calls it) writes what it always did."""
    body = _revision_0030_body()
    # Its head as 0030 wrote it (the arguments' names cannot change in place), its body a call.
    head = body[body.index("CREATE FUNCTION") : body.index(") LANGUAGE plpgsql") + 1]
    arguments = ", ".join(f"${number}" for number in range(1, _SETTLE_ARGUMENTS_0030 + 1))
    return (
        f"{_replaced_once(head, 'CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')} LANGUAGE sql AS $$"
        f" SELECT * FROM paycore_payments_settle({arguments}, NULL::bigint) $$"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_settle_0039())
        op.execute(_settle_0030_calls_the_new())
        op.execute(_CREATE_APPLY)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_APPLY}")
        op.execute(_replaced_once(_revision_0030_body(), "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
        op.execute(f"DROP FUNCTION {_SETTLE}")
