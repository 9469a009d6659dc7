"""PostgreSQL only: a bank webhook that moves a payout one step, in one call (ADR 0026 step 3).

A payout event saying `accepted` (to `sent`: its hold posted) or `rejected` (to `failed`: its
hold voided) for a payout still `processing` or `in_doubt` (the bank's answer to the send was
lost). The reference path (`inbound.service.receive`) stores the event, reads the payout FOR
UPDATE, moves it (the compare-and-set, the hold posted or voided with its accounts and entries,
the state event), records the event on the payout's audit log and sets the stored event's
status: about a dozen statements and a commit.

- `paycore_payouts_settle`, new: the payout's move (the plan of `paycore.payouts.settle_plan`):
  the compare-and-set (the payout as read: status, time, attempts, bank reference, batch and
  failure code, since the state event's snapshot is made from that read; the columns
  `Machine.changes` writes for `sent` or for `failed`), the hold's resolution (0042's
  `paycore_hold_resolve`), the state event. FALSE, having written nothing, when the payout
  moved first.
- `paycore_inbound_confirm_payout`, new: the plain case, the bank's `accepted` for a payout sent
  already (or settled, or returned): the event stored `stale` (a redelivery: `duplicate`, nothing
  written), the payout locked and checked (else PC013), the audit event (`no_change`).
- `paycore_inbound_apply_payout`, new: the event stored (`applied`, tried once, done; a
  redelivery writes nothing and answers `duplicate`), `paycore_payouts_settle` (FALSE: PC013),
  the event on the payout's audit log (`applied`). PC013 and the refusals undo the whole call,
  and the caller takes the reference path. Every statement filters by `p_tenant_id`, its first
  argument.

New functions only: the release before never calls them, and this release falls back to the
reference path where they do not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops them. SQLite: nothing (its statements are
`paycore.inbound.apply_payout_repository`'s and `paycore.payouts.settle_repository`'s).

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-06 17:15:00
"""

from __future__ import annotations

from alembic import op

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None

_PAYOUTS_SETTLE = (
    "paycore_payouts_settle(text, text, text, bigint, bigint, text, text, text, bigint, text, text, text, text,"
    " bigint, text, text, text[], text, text, text, text, text, text)"
)
_APPLY_PAYOUT = (
    "paycore_inbound_apply_payout(text, text, text, text, text, text, text, bigint, bigint, text, text, text, bigint,"
    " text, text, text, text, bigint, text, text, text[], text, text, text, text, text, text, text, text, text, text)"
)

_CONFIRM = (
    "paycore_inbound_confirm_payout(text, text, text, text, text, bigint, text, text, text[], text, text, text, text,"
    " text)"
)

_CREATE_PAYOUTS_SETTLE = """
CREATE FUNCTION paycore_payouts_settle(
    p_tenant_id text,
    p_payout_id text,
    -- the payout as read: the compare-and-set expects it so
    p_expected_status text,
    p_expected_updated_at_us bigint,
    p_expected_attempts bigint,
    p_expected_bank_reference text,
    p_expected_batch_id text,
    p_expected_failure_code text,
    -- the payout as the move leaves it: 'sent' (the hold posted) or 'failed' (voided)
    p_now_us bigint,
    p_status text,
    p_failure_code text,
    p_bank_reference text,
    p_batch_id text,
    p_amount_minor bigint,
    p_transfer_id text,
    p_resolution_id text,
    -- sent only: the entries' ids (the source debited, the in-transit account credited)
    p_entry_ids text[],
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    moved record;
    sent boolean := p_status = 'sent';
BEGIN
    IF p_status NOT IN ('sent', 'failed') THEN
        RAISE EXCEPTION 'a payout''s settle moves it to sent or failed, not %', p_status USING ERRCODE = 'PC009';
    END IF;
    -- What Machine.changes writes for each (paycore.payouts.lifecycle._columns_of): sent keeps its
    -- schedule (the bank's settlement is still to come), failed is terminal and clears it.
    UPDATE payouts SET status = p_status, updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        bank_reference = p_bank_reference, batch_id = p_batch_id,
        failure_code = CASE WHEN sent THEN failure_code ELSE p_failure_code END,
        sent_at_us = CASE WHEN sent THEN p_now_us ELSE sent_at_us END,
        in_doubt_since_us = NULL,
        next_attempt_at_us = CASE WHEN sent THEN next_attempt_at_us END,
        claimed_by = CASE WHEN sent THEN claimed_by END,
        claimed_until_us = CASE WHEN sent THEN claimed_until_us END
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = p_expected_status
        AND updated_at_us = p_expected_updated_at_us AND updated_at_us < p_now_us AND attempts = p_expected_attempts
        AND bank_reference IS NOT DISTINCT FROM p_expected_bank_reference
        AND batch_id IS NOT DISTINCT FROM p_expected_batch_id
        AND failure_code IS NOT DISTINCT FROM p_expected_failure_code
    RETURNING amount_minor, transfer_id INTO moved;
    IF NOT FOUND THEN
        RETURN false;  -- moved first (the resolver, a worker): the caller's reference path decides
    END IF;
    IF moved.amount_minor <> p_amount_minor OR moved.transfer_id <> p_transfer_id THEN
        RAISE EXCEPTION 'payout % is not the payout planned', p_payout_id USING ERRCODE = 'PC009';
    END IF;

    PERFORM paycore_hold_resolve(p_tenant_id, p_transfer_id, p_payout_id, p_amount_minor, sent, p_resolution_id,
        p_entry_ids, p_now_us);

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_state_event_id, 'state_change', p_state_type, 'payout', p_payout_id,
        p_expected_status, p_status, p_state_cause, p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payout_id),
        p_snapshot, p_now_us);
    RETURN true;
END $$
"""

_CREATE_APPLY_PAYOUT = """
CREATE FUNCTION paycore_inbound_apply_payout(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    -- the payout's move, as paycore_payouts_settle takes it
    p_payout_id text,
    p_expected_status text,
    p_expected_updated_at_us bigint,
    p_expected_attempts bigint,
    p_expected_bank_reference text,
    p_expected_batch_id text,
    p_expected_failure_code text,
    p_now_us bigint,
    p_status text,
    p_failure_code text,
    p_bank_reference text,
    p_batch_id text,
    p_amount_minor bigint,
    p_transfer_id text,
    p_resolution_id text,
    p_entry_ids text[],
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text,
    -- the event on the payout's audit log (its data as paycore.audit encodes it), its cause p_result
    p_audit_event_id text,
    p_audit_type text,
    p_audit_data text,
    p_result text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payout_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    IF NOT paycore_payouts_settle(p_tenant_id, p_payout_id, p_expected_status, p_expected_updated_at_us,
        p_expected_attempts, p_expected_bank_reference, p_expected_batch_id, p_expected_failure_code, p_now_us,
        p_status, p_failure_code, p_bank_reference, p_batch_id, p_amount_minor, p_transfer_id, p_resolution_id,
        p_entry_ids, p_state_event_id, p_state_type, p_state_cause, p_actor, p_state_data, p_snapshot) THEN
        RAISE EXCEPTION 'payout % is not % as read any more', p_payout_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payout', p_payout_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""

_CREATE_CONFIRM = """
CREATE FUNCTION paycore_inbound_confirm_payout(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    p_now_us bigint,
    p_result text,
    -- the payout named, which must be in one of p_statuses (sent already: nothing to do)
    p_payout_id text,
    p_statuses text[],
    -- the event on the payout's audit log (its data as paycore.audit encodes it), its cause p_cause
    p_audit_event_id text,
    p_audit_type text,
    p_actor text,
    p_audit_data text,
    p_cause text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payout_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    PERFORM 1 FROM payouts
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = ANY (p_statuses)
    FOR UPDATE;  -- the reference path's lock: nothing moves it before the commit
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payout % is not sent any more', p_payout_id USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payout', p_payout_id, NULL, NULL,
        p_cause, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_PAYOUTS_SETTLE)
        op.execute(_CREATE_APPLY_PAYOUT)
        op.execute(_CREATE_CONFIRM)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_CONFIRM}")
        op.execute(f"DROP FUNCTION {_APPLY_PAYOUT}")
        op.execute(f"DROP FUNCTION {_PAYOUTS_SETTLE}")
