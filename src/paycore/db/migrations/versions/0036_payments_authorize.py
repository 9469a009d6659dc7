"""PostgreSQL only: an authorization's accept and settle on the data plane (ADR 0026 step 3,
ADR 0029).

- `paycore_payments_accept` gains a last argument, the payment's capture method: revision
  0027's body with `capture_method` written, as a new signature (a function's arguments cannot
  change in place). The 0027 signature is replaced (CREATE OR REPLACE) by a one-line call of the
  new one with `'automatic'`, so the release before (which calls it) writes what it always did.
- `paycore_payments_authorize`, new: an authorization's settle phase, the processor having said
  `requires_capture`: the compare-and-set `processing -> requires_capture` writing what
  `payments.lifecycle.authorization_values` says (the amount capturable, 0 captured, the
  authorization's lifetime) and what every move writes (`Machine.changes`: the fault cleared,
  unscheduled: an open authorization waits for its merchant), the call's event, the state event
  (numbered after the payment's last), the creating request's answer. The hold stays pending:
  no ledger row (0030's `paycore_payments_settle` resolves a hold and returns its accounts,
  which this phase has none of). It returns false, having written nothing, when the
  compare-and-set found the payment moved; PC004 when the key was answered already; PC009 when
  the payment is not the one planned. Every statement filters by `p_tenant_id`, its first
  argument.
- `paycore_payments_capture_begin` and `paycore_payments_cancel_begin`: an operation's begin
  (the request's key claimed open, `requires_capture -> processing` on the payment exactly as
  the caller read it, the operation and its key stored, its event; PC004, nothing written, when
  the payment moved since); `paycore_payments_capture_finish` (`processing -> succeeded`, the
  hold posted for what was captured and the rest released in the same step) and
  `paycore_payments_cancel_finish` (`processing -> canceled`, the hold voided), each with the
  call's and the state's events and the request's answer (ADR 0029).

This release's code calls the new signatures and falls back to the reference path where they do
not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION stays 0035. Downgrade drops both
new functions and puts 0027's body back. SQLite: nothing (its statements are
`paycore.payments.accept_repository`'s and `settle_repository`'s).

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

_ACCEPT_0027 = (
    "paycore_payments_accept(text, text, text, bigint, text, text, text, bigint, text, text, text, text[], text,"
    " text, text, text, text, bigint, text, text, text, text, text, text, text)"
)
_ACCEPT_ARGUMENTS_0027 = 25
# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_ACCEPT = _ACCEPT_0027[:-1] + ", text)"
_AUTHORIZE = (
    "paycore_payments_authorize(text, text, text, bigint, text, text, bigint, bigint, bigint, text[], text[],"
    " text[], text, text, text, text, integer, text)"
)


def _revision_0027_body() -> str:
    """Revision 0027's function (history: that file never changes)."""
    path = Path(__file__).with_name("0027_payments_accept.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0027", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._CREATE)


def _replaced_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _accept_with_capture_method() -> str:
    """0027's function, its capture method the last argument and written with the payment."""
    body = _replaced_once(
        _revision_0027_body(),
        "    p_event_snapshot text\n) RETURNS boolean",
        "    p_event_snapshot text,\n    p_capture_method text\n) RETURNS boolean",
    )
    body = _replaced_once(
        body,
        "faulted_at_us, created_at_us, updated_at_us)\n",
        "faulted_at_us, created_at_us, updated_at_us,\n        capture_method)\n",
    )
    return _replaced_once(
        body,
        "p_next_attempt_at_us, NULL, NULL, NULL, NULL, NULL, p_now_us, p_now_us);",
        "p_next_attempt_at_us, NULL, NULL, NULL, NULL, NULL, p_now_us, p_now_us, p_capture_method);",
    )


def _accept_0027_calls_the_new() -> str:
    """0027's signature (its argument names kept, as CREATE OR REPLACE requires) calling the new."""
    head = _revision_0027_body().split(") RETURNS boolean", 1)[0]
    head = _replaced_once(head, "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    arguments = ", ".join(f"${n}" for n in range(1, _ACCEPT_ARGUMENTS_0027 + 1))
    return f"{head}) RETURNS boolean LANGUAGE sql AS $$ SELECT paycore_payments_accept({arguments}, 'automatic') $$"


_CREATE_AUTHORIZE = """
CREATE FUNCTION paycore_payments_authorize(
    p_tenant_id text,
    p_payment_id text,
    p_key text,
    p_now_us bigint,
    p_expected_status text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_amount_capturable_minor bigint,
    p_authorization_expires_at_us bigint,
    -- the call's event, then the state event: ids, types, causes
    p_event_ids text[],
    p_event_types text[],
    p_event_causes text[],
    p_actor text,
    p_call_data text,
    p_state_data text,
    p_snapshot text,
    p_response_status integer,
    p_response_body text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    moved record;
BEGIN
    IF p_amount_capturable_minor <= 0 OR p_amount_capturable_minor > p_amount_minor
        OR p_authorization_expires_at_us IS NULL THEN
        RAISE EXCEPTION 'an authorization of % cannot hold %', p_amount_minor, p_amount_capturable_minor
            USING ERRCODE = 'PC009';
    END IF;
    UPDATE payments SET status = 'requires_capture', updated_at_us = p_now_us, fault_code = NULL,
        faulted_at_us = NULL, processor_reference = p_processor_reference, failure_code = NULL,
        next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL,
        amount_capturable_minor = p_amount_capturable_minor, amount_captured_minor = 0,
        authorization_expires_at_us = p_authorization_expires_at_us
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = p_expected_status
        AND capture_method = 'manual' AND updated_at_us < p_now_us
    RETURNING idempotency_key, amount_minor INTO moved;
    IF NOT FOUND THEN
        RETURN false;  -- moved first (a webhook, the resolver): the caller's reference path replays it
    END IF;
    IF moved.idempotency_key <> p_key OR moved.amount_minor <> p_amount_minor THEN
        RAISE EXCEPTION 'payment % is not the payment planned', p_payment_id USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_ids[2], 'state_change', p_event_types[2], 'payment', p_payment_id,
        p_expected_status, 'requires_capture', p_event_causes[2], p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id),
        p_snapshot, p_now_us);

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % was recorded already', p_key USING ERRCODE = 'PC004';
    END IF;
    RETURN true;
END $$
"""


_CAPTURE_BEGIN = (
    "paycore_payments_capture_begin(text, text, text, bigint, text, bigint, bigint, bigint, bigint, text, text,"
    " text, text, text, text)"
)
_CAPTURE_FINISH = (
    "paycore_payments_capture_finish(text, text, text, bigint, text, bigint, bigint, bigint, text, text, text,"
    " text[], text[], text[], text[], text, text, text, text, integer, text)"
)

# A capture's begin: the request's key claimed open (queued on its advisory lock as every claim
# is), then the compare-and-set `requires_capture -> processing` on the payment exactly as the
# caller read it (its last change the token), storing the capture in flight, and its state event.
_CREATE_CAPTURE_BEGIN = f"""
CREATE FUNCTION paycore_payments_capture_begin(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_created_at_us bigint,
    p_payment_id text,
    p_expected_updated_at_us bigint,
    p_now_us bigint,
    p_capture_requested_minor bigint,
    p_next_attempt_at_us bigint,
    p_event_id text,
    p_event_type text,
    p_event_cause text,
    p_actor text,
    p_event_data text,
    p_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_key_created_at_us, NULL)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays, waits or refuses it
    END IF;
    UPDATE payments SET status = 'processing', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        operation = 'capture', operation_idempotency_key = p_key, capture_requested_minor = p_capture_requested_minor,
        next_attempt_at_us = p_next_attempt_at_us
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = 'requires_capture'
        AND updated_at_us = p_expected_updated_at_us AND operation IS NULL
        AND p_capture_requested_minor > 0
        AND p_capture_requested_minor <= coalesce(amount_capturable_minor, amount_minor);
    IF NOT FOUND THEN
        -- moved since it was read (a racing capture, cancel or webhook): the claim rolls back too
        RAISE EXCEPTION 'payment % is not the authorization planned', p_payment_id USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_id, 'state_change', p_event_type, 'payment', p_payment_id,
        'requires_capture', 'processing', p_event_cause, p_actor, p_event_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id),
        p_snapshot, p_now_us);
    RETURN true;
END $$
"""

# A capture's finish: revision 0030's settle, for a capture in flight (matched by the request's
# own key) that the processor captured: `processing -> succeeded` with its figures, the hold
# posted for what was captured and the rest released, the events, the capture request's answer.
_CREATE_CAPTURE_FINISH = """
CREATE FUNCTION paycore_payments_capture_finish(
    p_tenant_id text,
    p_payment_id text,
    p_key text,
    p_now_us bigint,
    p_processor_reference text,
    p_amount_minor bigint,
    p_captured_minor bigint,
    p_authorization_expires_at_us bigint,
    p_transfer_id text,
    p_destination_account_id text,
    p_resolution_id text,
    p_entry_ids text[],
    p_event_ids text[],
    p_event_types text[],
    p_event_causes text[],
    p_actor text,
    p_call_data text,
    p_state_data text,
    p_snapshot text,
    p_response_status integer,
    p_response_body text
) RETURNS TABLE (
    out_id text,
    out_code text,
    out_currency text,
    out_normal_balance text,
    out_no_overdraft boolean,
    out_system boolean,
    out_metadata text,
    out_created_at_us bigint,
    out_debits_posted bigint,
    out_credits_posted bigint,
    out_debits_pending bigint,
    out_credits_pending bigint,
    out_entries_count bigint
) LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    moved record;
    hold record;
    held record;
    posted_debit bigint;
    posted_credit bigint;
    pending_debit bigint;
    pending_credit bigint;
    figures_after numeric[];
    figures_before numeric[];
    updated integer := 0;
BEGIN
    IF p_captured_minor <= 0 OR p_captured_minor > p_amount_minor THEN
        RAISE EXCEPTION 'a capture of % from %', p_captured_minor, p_amount_minor USING ERRCODE = 'PC009';
    END IF;
    UPDATE payments SET status = 'succeeded', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        processor_reference = p_processor_reference, next_attempt_at_us = NULL, claimed_by = NULL,
        claimed_until_us = NULL, amount_capturable_minor = 0, amount_captured_minor = p_captured_minor,
        authorization_expires_at_us = p_authorization_expires_at_us
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = 'processing' AND operation = 'capture'
        AND operation_idempotency_key = p_key AND capture_requested_minor = p_captured_minor
        AND updated_at_us < p_now_us
    RETURNING amount_minor, transfer_id, destination_account_id INTO moved;
    IF NOT FOUND THEN
        RETURN;  -- moved first (a webhook, the resolver): the caller's reference path replays it
    END IF;
    IF moved.amount_minor <> p_amount_minor OR moved.transfer_id <> p_transfer_id
        OR moved.destination_account_id <> p_destination_account_id THEN
        RAISE EXCEPTION 'payment % is not the payment planned', p_payment_id USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);

    SELECT t.kind, t.owner_id, t.expires_at_us, t.reference_type, t.reference_id INTO hold
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_transfer_id;
    IF NOT FOUND OR hold.kind <> 'pending' OR hold.owner_id IS DISTINCT FROM p_payment_id
        OR hold.expires_at_us IS NOT NULL THEN
        RAISE EXCEPTION 'the hold % is not this payment''s pending transfer', p_transfer_id
            USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_resolution_id, 'post', p_transfer_id, NULL, NULL, NULL, hold.reference_type,
        hold.reference_id, hold.owner_id, '{}', NULL, p_now_us)
    ON CONFLICT (tenant_id, pending_id) WHERE pending_id IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the hold % is resolved already', p_transfer_id USING ERRCODE = 'PC004';
    END IF;

    -- The hold's accounts in id order, as every transfer locks them: each released by the hold's
    -- entry, and moved by what was captured.
    FOR held IN
        SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
        WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
        ORDER BY e.account_id
    LOOP
        IF held.amount_minor <> p_amount_minor
            OR (held.direction = 'credit') <> (held.account_id = p_destination_account_id) THEN
            RAISE EXCEPTION 'the hold % is not the payment''s', p_transfer_id USING ERRCODE = 'PC009';
        END IF;
        pending_debit := CASE WHEN held.direction = 'debit' THEN held.amount_minor ELSE 0 END;
        pending_credit := held.amount_minor - pending_debit;
        posted_debit := CASE WHEN held.direction = 'debit' THEN p_captured_minor ELSE 0 END;
        posted_credit := p_captured_minor - posted_debit;
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + posted_debit,
            credits_posted_minor = credits_posted_minor + posted_credit,
            debits_pending_minor = debits_pending_minor - pending_debit,
            credits_pending_minor = credits_pending_minor - pending_credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND id = held.account_id
            AND debits_posted_minor <= total_max - posted_debit
            AND credits_posted_minor <= total_max - posted_credit
        RETURNING ledger_accounts.id, ledger_accounts.code, ledger_accounts.currency, ledger_accounts.normal_balance,
            ledger_accounts.no_overdraft, ledger_accounts.system, ledger_accounts.metadata,
            ledger_accounts.created_at_us, debits_posted_minor, credits_posted_minor, debits_pending_minor,
            credits_pending_minor, ledger_accounts.entries_count
        INTO out_id, out_code, out_currency, out_normal_balance, out_no_overdraft, out_system, out_metadata,
            out_created_at_us, out_debits_posted, out_credits_posted, out_debits_pending, out_credits_pending,
            out_entries_count;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range', held.account_id
                USING ERRCODE = 'PC001', DETAIL = held.account_id;
        END IF;
        figures_after := paycore_balance_figures(out_normal_balance, out_debits_posted, out_credits_posted,
            out_debits_pending, out_credits_pending);
        figures_before := paycore_balance_figures(out_normal_balance, out_debits_posted - posted_debit,
            out_credits_posted - posted_credit, out_debits_pending + pending_debit,
            out_credits_pending + pending_credit);
        FOR k IN 1 .. 4 LOOP
            IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', held.account_id
                    USING ERRCODE = 'PC003', DETAIL = held.account_id;
            END IF;
        END LOOP;
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        VALUES (p_tenant_id, p_entry_ids[CASE WHEN held.direction = 'debit' THEN 1 ELSE 2 END],
            p_resolution_id, held.account_id, held.direction, p_captured_minor, out_currency, out_entries_count,
            p_now_us);
        IF out_no_overdraft AND (
            (out_normal_balance = 'credit' AND out_credits_posted - out_debits_posted - out_debits_pending < 0)
            OR (out_normal_balance = 'debit' AND out_debits_posted - out_credits_posted - out_credits_pending < 0))
        THEN
            RAISE EXCEPTION 'account % has insufficient available funds', held.account_id
                USING ERRCODE = 'PC002', DETAIL = held.account_id;
        END IF;
        updated := updated + 1;
        RETURN NEXT;
    END LOOP;
    IF updated <> 2 THEN
        RAISE EXCEPTION 'a payment''s hold moves two accounts, found %', updated USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_ids[2], 'state_change', p_event_types[2], 'payment', p_payment_id,
        'processing', 'succeeded', p_event_causes[2], p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id),
        p_snapshot, p_now_us);

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % was recorded already', p_key USING ERRCODE = 'PC004';
    END IF;
END $$
"""


_CANCEL_BEGIN = (
    "paycore_payments_cancel_begin(text, text, text, bigint, text, bigint, bigint, bigint, text, text, text, text,"
    " text, text)"
)
_CANCEL_FINISH = (
    "paycore_payments_cancel_finish(text, text, text, bigint, text, bigint, bigint, text, text, text, text,"
    " text[], text[], text[], text, text, text, text, integer, text)"
)

# A cancel's begin: as a capture's (the key claimed open, `requires_capture -> processing` on
# the payment exactly as read), the operation `cancel`, no amount.
_CREATE_CANCEL_BEGIN = f"""
CREATE FUNCTION paycore_payments_cancel_begin(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_created_at_us bigint,
    p_payment_id text,
    p_expected_updated_at_us bigint,
    p_now_us bigint,
    p_next_attempt_at_us bigint,
    p_event_id text,
    p_event_type text,
    p_event_cause text,
    p_actor text,
    p_event_data text,
    p_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_key_created_at_us, NULL)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays, waits or refuses it
    END IF;
    UPDATE payments SET status = 'processing', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        operation = 'cancel', operation_idempotency_key = p_key, capture_requested_minor = NULL,
        next_attempt_at_us = p_next_attempt_at_us
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = 'requires_capture'
        AND updated_at_us = p_expected_updated_at_us AND operation IS NULL;
    IF NOT FOUND THEN
        -- moved since it was read (a racing capture, cancel or webhook): the claim rolls back too
        RAISE EXCEPTION 'payment % is not the authorization planned', p_payment_id USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_id, 'state_change', p_event_type, 'payment', p_payment_id,
        'requires_capture', 'processing', p_event_cause, p_actor, p_event_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id),
        p_snapshot, p_now_us);
    RETURN true;
END $$
"""

# A cancel's finish: `processing -> canceled` (the processor canceled the authorization), the
# hold voided (each account's pending released, no entry), the events, the cancel's answer.
_CREATE_CANCEL_FINISH = """
CREATE FUNCTION paycore_payments_cancel_finish(
    p_tenant_id text,
    p_payment_id text,
    p_key text,
    p_now_us bigint,
    p_processor_reference text,
    p_amount_minor bigint,
    p_authorization_expires_at_us bigint,
    p_cancellation_reason text,
    p_transfer_id text,
    p_destination_account_id text,
    p_resolution_id text,
    p_event_ids text[],
    p_event_types text[],
    p_event_causes text[],
    p_actor text,
    p_call_data text,
    p_state_data text,
    p_snapshot text,
    p_response_status integer,
    p_response_body text
) RETURNS TABLE (
    out_id text,
    out_code text,
    out_currency text,
    out_normal_balance text,
    out_no_overdraft boolean,
    out_system boolean,
    out_metadata text,
    out_created_at_us bigint,
    out_debits_posted bigint,
    out_credits_posted bigint,
    out_debits_pending bigint,
    out_credits_pending bigint,
    out_entries_count bigint
) LANGUAGE plpgsql AS $$
DECLARE
    moved record;
    hold record;
    held record;
    pending_debit bigint;
    pending_credit bigint;
    updated integer := 0;
BEGIN
    UPDATE payments SET status = 'canceled', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        processor_reference = p_processor_reference, next_attempt_at_us = NULL, claimed_by = NULL,
        claimed_until_us = NULL, amount_capturable_minor = 0, amount_captured_minor = 0,
        authorization_expires_at_us = p_authorization_expires_at_us, cancellation_reason = p_cancellation_reason
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = 'processing' AND operation = 'cancel'
        AND operation_idempotency_key = p_key AND updated_at_us < p_now_us
    RETURNING amount_minor, transfer_id, destination_account_id INTO moved;
    IF NOT FOUND THEN
        RETURN;  -- moved first (a webhook, the resolver): the caller's reference path replays it
    END IF;
    IF moved.amount_minor <> p_amount_minor OR moved.transfer_id <> p_transfer_id
        OR moved.destination_account_id <> p_destination_account_id THEN
        RAISE EXCEPTION 'payment % is not the payment planned', p_payment_id USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);

    SELECT t.kind, t.owner_id, t.expires_at_us, t.reference_type, t.reference_id INTO hold
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_transfer_id;
    IF NOT FOUND OR hold.kind <> 'pending' OR hold.owner_id IS DISTINCT FROM p_payment_id
        OR hold.expires_at_us IS NOT NULL THEN
        RAISE EXCEPTION 'the hold % is not this payment''s pending transfer', p_transfer_id
            USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_resolution_id, 'void', p_transfer_id, NULL, NULL, NULL, hold.reference_type,
        hold.reference_id, hold.owner_id, '{}', NULL, p_now_us)
    ON CONFLICT (tenant_id, pending_id) WHERE pending_id IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the hold % is resolved already', p_transfer_id USING ERRCODE = 'PC004';
    END IF;

    -- The hold's accounts in id order, as every transfer locks them: each released by the hold's
    -- entry (a release is never refused by the balance limit; the overdraft flag still holds).
    FOR held IN
        SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
        WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
        ORDER BY e.account_id
    LOOP
        IF held.amount_minor <> p_amount_minor
            OR (held.direction = 'credit') <> (held.account_id = p_destination_account_id) THEN
            RAISE EXCEPTION 'the hold % is not the payment''s', p_transfer_id USING ERRCODE = 'PC009';
        END IF;
        pending_debit := CASE WHEN held.direction = 'debit' THEN held.amount_minor ELSE 0 END;
        pending_credit := held.amount_minor - pending_debit;
        UPDATE ledger_accounts SET
            debits_pending_minor = debits_pending_minor - pending_debit,
            credits_pending_minor = credits_pending_minor - pending_credit
        WHERE tenant_id = p_tenant_id AND id = held.account_id
        RETURNING ledger_accounts.id, ledger_accounts.code, ledger_accounts.currency, ledger_accounts.normal_balance,
            ledger_accounts.no_overdraft, ledger_accounts.system, ledger_accounts.metadata,
            ledger_accounts.created_at_us, debits_posted_minor, credits_posted_minor, debits_pending_minor,
            credits_pending_minor, ledger_accounts.entries_count
        INTO out_id, out_code, out_currency, out_normal_balance, out_no_overdraft, out_system, out_metadata,
            out_created_at_us, out_debits_posted, out_credits_posted, out_debits_pending, out_credits_pending,
            out_entries_count;
        IF out_no_overdraft AND (
            (out_normal_balance = 'credit' AND out_credits_posted - out_debits_posted - out_debits_pending < 0)
            OR (out_normal_balance = 'debit' AND out_debits_posted - out_credits_posted - out_credits_pending < 0))
        THEN
            RAISE EXCEPTION 'account % has insufficient available funds', held.account_id
                USING ERRCODE = 'PC002', DETAIL = held.account_id;
        END IF;
        updated := updated + 1;
        RETURN NEXT;
    END LOOP;
    IF updated <> 2 THEN
        RAISE EXCEPTION 'a payment''s hold moves two accounts, found %', updated USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_ids[2], 'state_change', p_event_types[2], 'payment', p_payment_id,
        'processing', 'canceled', p_event_causes[2], p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id),
        p_snapshot, p_now_us);

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % was recorded already', p_key USING ERRCODE = 'PC004';
    END IF;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_accept_with_capture_method())
        op.execute(_accept_0027_calls_the_new())
        op.execute(_CREATE_AUTHORIZE)
        op.execute(_CREATE_CAPTURE_BEGIN)
        op.execute(_CREATE_CAPTURE_FINISH)
        op.execute(_CREATE_CANCEL_BEGIN)
        op.execute(_CREATE_CANCEL_FINISH)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in (_CANCEL_FINISH, _CANCEL_BEGIN, _CAPTURE_FINISH, _CAPTURE_BEGIN, _AUTHORIZE):
            op.execute(f"DROP FUNCTION {signature}")
        op.execute(_replaced_once(_revision_0027_body(), "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
        op.execute(f"DROP FUNCTION {_ACCEPT}")
