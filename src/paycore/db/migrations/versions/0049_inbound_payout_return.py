"""PostgreSQL only: the bank's webhook that returns a settled payout, and its `settled` for a payout
still waiting, each in one call (ADR 0026 step 3).

- `paycore_inbound_return_payout`, new: a `returned` word for a payout `settled`, inside its
  return window (Python reads the window from the payout's settlement; the compare-and-set
  expects the payout as read, so its settlement cannot have moved). The event stored (`applied`,
  tried once, done; a redelivery writes nothing and answers `duplicate`), the compare-and-set to
  `returned` (the columns `Machine.changes` writes: the status, its time, the fault and the
  schedule cleared, the return code, `returned_at_us`, the in-doubt time cleared; PC013 where it
  moved first), the state event, the return's transfer and the return fee's, their entries, the
  adjustments (PC013 where the payout has one of their keys) and their audit events, the
  webhook's audit event.
- `paycore_inbound_settle_waiting_payout`, new: a `settled` word for a payout still `processing`
  or `in_doubt`, moved as the reference path moves it, step by step: to `sent` by
  `paycore_payouts_settle` (0043: the hold posted, the state event; PC013 where it moved first),
  then to `settled` a microsecond later (the compare-and-set from `sent` as the first step left
  it, the pay-out transfer, the state event) and the bank's fee at the webhook's time.
- `paycore_payout_post` and `paycore_payout_adjust`, new, the two functions' shared parts: a
  payout's posted transfers and their entries (each entry's account by its id, or by its code
  in the payout's currency; its totals, the range, the balance limit and no overdraft checked as
  `paycore_hold_resolve` checks them; its number the account's entry count), and the bank's
  adjustments with their audit events.

Every statement filters by `p_tenant_id`, each function's first argument, and a published event
is numbered by `INSERT ... SELECT` (the form Citus runs on the tenant's worker, migration 0048).
PC013 and the refusals (PC001-PC003, PC009) undo the whole call, and the caller takes the
reference path. New functions only: the release before never calls them, and this release falls
back to the reference path where they do not exist yet (SQLSTATE 42883), so
OLDEST_COMPATIBLE_REVISION does not move. Downgrade drops them. SQLite: nothing (its statements are
`paycore.payouts.return_repository`'s and `settlement_repository`'s).

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-06 23:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0049"
down_revision = "0048"
branch_labels = None
depends_on = None

_POST = (
    "paycore_payout_post(text, text, text, text[], text[], bigint[], text[], text[], text[], text[], text[], bigint[])"
)
_ADJUST = (
    "paycore_payout_adjust(text, text, text, bigint, text, text, text, text[], text[], bigint[], text[], "
    "text[], text[])"
)
_RETURN_PAYOUT = (
    "paycore_inbound_return_payout(text, text, text, text, text, text, text, bigint, bigint, text, text, "
    "text, bigint, text, bigint, text, text, bigint, text[], text[], bigint[], text[], text[], text[], "
    "text[], text[], bigint[], text, text, text[], text[], bigint[], text[], text[], text[], text, text, "
    "text, text, text, text, text, text, text, text)"
)
_SETTLE_WAITING_PAYOUT = (
    "paycore_inbound_settle_waiting_payout(text, text, text, text, text, text, text, bigint, bigint, "
    "text, text, text, bigint, text, text, text[], text, text, text, bigint, text, text, bigint, text, "
    "text[], text[], bigint[], text[], text[], text[], text[], text[], bigint[], text, text, text[], "
    "text[], bigint[], text[], text[], text[], text, text, text, text, text, text, text, text, text, "
    "text)"
)

_CREATE_POST = """
CREATE FUNCTION paycore_payout_post(
    p_tenant_id text,
    p_payout_id text,
    p_currency text,
    -- the posted transfers the payout owns, and when each was made
    p_transfer_ids text[],
    p_reference_types text[],
    p_transfer_times bigint[],
    -- their entries, each account by its id or (its id NULL) by its code
    p_entry_ids text[],
    p_entry_transfer_ids text[],
    p_entry_account_ids text[],
    p_entry_codes text[],
    p_entry_directions text[],
    p_entry_amounts bigint[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    account record;
    account_id text;
    debit bigint;
    credit bigint;
    figures_after numeric[];
    figures_before numeric[];
BEGIN
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    SELECT p_tenant_id, t.id, 'transfer', NULL, NULL, NULL, NULL, t.reference_type, p_payout_id, p_payout_id, '{}',
        NULL, t.created_at_us
    FROM unnest(p_transfer_ids, p_reference_types, p_transfer_times) AS t(id, reference_type, created_at_us);

    -- Each entry's account in the reference path's order (each transfer's, then the next's).
    FOR k IN 1 .. coalesce(array_length(p_entry_ids, 1), 0) LOOP
        account_id := p_entry_account_ids[k];
        IF account_id IS NULL THEN
            SELECT a.id INTO account_id FROM ledger_accounts a
            WHERE a.tenant_id = p_tenant_id AND a.code = p_entry_codes[k] AND a.currency = p_currency;
        END IF;
        debit := CASE WHEN p_entry_directions[k] = 'debit' THEN p_entry_amounts[k] ELSE 0 END;
        credit := p_entry_amounts[k] - debit;
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + debit,
            credits_posted_minor = credits_posted_minor + credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND id = account_id AND currency = p_currency
            AND debits_posted_minor <= total_max - debit AND credits_posted_minor <= total_max - credit
        RETURNING ledger_accounts.id, ledger_accounts.normal_balance, ledger_accounts.no_overdraft,
            debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO account;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % is missing or would leave its balance range',
                coalesce(p_entry_account_ids[k], p_entry_codes[k])
                USING ERRCODE = 'PC001', DETAIL = coalesce(p_entry_account_ids[k], p_entry_codes[k]);
        END IF;
        figures_after := paycore_balance_figures(account.normal_balance, account.debits_posted_minor,
            account.credits_posted_minor, account.debits_pending_minor, account.credits_pending_minor);
        figures_before := paycore_balance_figures(account.normal_balance, account.debits_posted_minor - debit,
            account.credits_posted_minor - credit, account.debits_pending_minor, account.credits_pending_minor);
        FOR f IN 1 .. 4 LOOP
            IF abs(figures_after[f]) > balance_max AND abs(figures_after[f]) > abs(figures_before[f]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', account.id
                    USING ERRCODE = 'PC003', DETAIL = account.id;
            END IF;
        END LOOP;
        IF account.no_overdraft AND (
            (account.normal_balance = 'credit'
                AND account.credits_posted_minor - account.debits_posted_minor - account.debits_pending_minor < 0)
            OR (account.normal_balance = 'debit'
                AND account.debits_posted_minor - account.credits_posted_minor - account.credits_pending_minor < 0))
        THEN
            RAISE EXCEPTION 'account % has insufficient available funds', account.id
                USING ERRCODE = 'PC002', DETAIL = account.id;
        END IF;
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        VALUES (p_tenant_id, p_entry_ids[k], p_entry_transfer_ids[k], account.id, p_entry_directions[k],
            p_entry_amounts[k], p_currency, account.entries_count,
            p_transfer_times[array_position(p_transfer_ids, p_entry_transfer_ids[k])]);
    END LOOP;
END $$
"""

_CREATE_ADJUST = """
CREATE FUNCTION paycore_payout_adjust(
    p_tenant_id text,
    p_payout_id text,
    p_currency text,
    p_now_us bigint,
    p_actor text,
    p_code text,
    p_effective_on text,
    -- the bank's adjustments (adjustments.record, source 'bank'), each with its transfer and audit event
    p_ids text[],
    p_kinds text[],
    p_amounts bigint[],
    p_transfer_ids text[],
    p_event_ids text[],
    p_event_data text[]  -- as paycore.audit encodes it
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    added bigint;
BEGIN
    INSERT INTO payout_adjustments (tenant_id, id, payout_id, kind, amount_minor, currency, code, effective_on,
        source, dedupe_key, transfer_id, note, created_at_us)
    SELECT p_tenant_id, a.id, p_payout_id, a.kind, a.amount_minor, p_currency, p_code, p_effective_on, 'bank',
        'bank:' || a.kind, a.transfer_id, NULL, p_now_us
    FROM unnest(p_ids, p_kinds, p_amounts, p_transfer_ids) AS a(id, kind, amount_minor, transfer_id)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS added = ROW_COUNT;
    IF added <> coalesce(array_length(p_ids, 1), 0) THEN
        RAISE EXCEPTION 'payout % has one of these adjustments already', p_payout_id USING ERRCODE = 'PC013';
    END IF;
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    SELECT p_tenant_id, a.event_id, 'adjustment', 'payout.adjustment.' || a.kind, 'payout', p_payout_id, NULL, NULL,
        'bank', p_actor, a.data, p_now_us
    FROM unnest(p_kinds, p_event_ids, p_event_data) AS a(kind, event_id, data);
END $$
"""

# The webhook's stored event and its audit event, as 0045's function writes them.
_STORE_EVENT = """
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payout_id, p_payload, p_result, 1, NULL, p_event_at_us,
        p_event_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;
"""
_AUDIT_EVENT = """
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payout', p_payout_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_event_at_us);
    RETURN p_result;
"""
# The state event, numbered after the payout's last published change in the form Citus runs (0048).
_STATE_EVENT = """
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    SELECT p_tenant_id, p_state_event_id, 'state_change', p_state_type, 'payout', p_payout_id,
        {from_state}, {to_state}, p_state_cause, p_actor, p_state_data,
        coalesce(max(e.object_sequence), 0) + 1, p_snapshot, p_now_us
    FROM events e WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payout_id;
"""
_AS_READ = """
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = p_expected_status
        AND updated_at_us = p_expected_updated_at_us AND updated_at_us < p_now_us AND attempts = p_expected_attempts
        AND bank_reference IS NOT DISTINCT FROM p_expected_bank_reference
        AND batch_id IS NOT DISTINCT FROM p_expected_batch_id
        AND failure_code IS NOT DISTINCT FROM p_expected_failure_code
"""
# Each inbound function's arguments: the stored event's first, the payout as read, then its own.
_HEAD = """
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done at p_event_at_us: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    -- the payout as read: the compare-and-set expects it so
    p_payout_id text,
    p_expected_status text,
    p_expected_updated_at_us bigint,
    p_expected_attempts bigint,
    p_expected_bank_reference text,
    p_expected_batch_id text,
    p_expected_failure_code text,
"""
_POSTINGS = """
    -- the posted transfers and their entries (paycore_payout_post)
    p_transfer_ids text[],
    p_reference_types text[],
    p_transfer_times bigint[],
    p_entry_ids text[],
    p_entry_transfer_ids text[],
    p_entry_account_ids text[],
    p_entry_codes text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    -- the bank's adjustments, none or more (paycore_payout_adjust), at p_event_at_us
    p_adjustment_code text,
    p_effective_on text,
    p_adjustment_ids text[],
    p_adjustment_kinds text[],
    p_adjustment_amounts bigint[],
    p_adjustment_transfer_ids text[],
    p_adjustment_event_ids text[],
    p_adjustment_event_data text[],
"""
_TAIL = """
    -- the state event (the last step's), the webhook's audit event
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text,
    p_audit_event_id text,
    p_audit_type text,
    p_audit_data text,
    p_result text
"""
_POST_AND_ADJUST = """
    PERFORM paycore_payout_post(p_tenant_id, p_payout_id, p_currency, p_transfer_ids, p_reference_types,
        p_transfer_times, p_entry_ids, p_entry_transfer_ids, p_entry_account_ids, p_entry_codes, p_entry_directions,
        p_entry_amounts);
    IF coalesce(array_length(p_adjustment_ids, 1), 0) > 0 THEN
        PERFORM paycore_payout_adjust(p_tenant_id, p_payout_id, p_currency, p_event_at_us, p_actor, p_adjustment_code,
            p_effective_on, p_adjustment_ids, p_adjustment_kinds, p_adjustment_amounts, p_adjustment_transfer_ids,
            p_adjustment_event_ids, p_adjustment_event_data);
    END IF;
"""
_MOVED_FIRST = """
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payout % is not % as read any more', p_payout_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;
"""

_CREATE_RETURN_PAYOUT = f"""
CREATE FUNCTION paycore_inbound_return_payout({_HEAD}
    -- the payout as the move leaves it: returned at p_now_us (the webhook's time)
    p_now_us bigint,
    p_return_code text,
    p_amount_minor bigint,
    p_currency text,
    p_source_account_id text,
    p_settled_at_us bigint,{_POSTINGS}{_TAIL}) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    p_event_at_us constant bigint := p_now_us;
    moved record;
BEGIN{_STORE_EVENT}
    -- What Machine.changes writes for returned (paycore.payouts.lifecycle._columns_of): terminal, the
    -- schedule cleared.
    UPDATE payouts SET status = 'returned', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        return_code = p_return_code, next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL,
        returned_at_us = p_now_us, in_doubt_since_us = NULL{_AS_READ}
    RETURNING amount_minor, currency, source_account_id, settled_at_us INTO moved;{_MOVED_FIRST}
    IF moved.amount_minor <> p_amount_minor OR moved.currency <> p_currency
        OR moved.source_account_id <> p_source_account_id OR moved.settled_at_us IS DISTINCT FROM p_settled_at_us THEN
        RAISE EXCEPTION 'payout % is not the payout planned', p_payout_id USING ERRCODE = 'PC009';
    END IF;
{_STATE_EVENT.format(from_state="'settled'", to_state="'returned'")}{_POST_AND_ADJUST}{_AUDIT_EVENT}END $$
"""

_CREATE_SETTLE_WAITING_PAYOUT = f"""
CREATE FUNCTION paycore_inbound_settle_waiting_payout({_HEAD}
    -- the first step, to sent at p_event_at_us (the webhook's time): paycore_payouts_settle's (the hold posted)
    p_event_at_us bigint,
    p_hold_transfer_id text,
    p_resolution_id text,
    p_hold_entry_ids text[],
    p_sent_event_id text,
    p_sent_type text,
    p_sent_snapshot text,
    -- the second, to settled at p_now_us (a microsecond later, as Machine.changes makes it)
    p_now_us bigint,
    p_bank_reference text,
    p_batch_id text,
    p_amount_minor bigint,
    p_currency text,{_POSTINGS}{_TAIL}) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    moved record;
BEGIN{_STORE_EVENT}
    IF NOT paycore_payouts_settle(p_tenant_id, p_payout_id, p_expected_status, p_expected_updated_at_us,
        p_expected_attempts, p_expected_bank_reference, p_expected_batch_id, p_expected_failure_code, p_event_at_us,
        'sent', NULL, p_bank_reference, p_batch_id, p_amount_minor, p_hold_transfer_id, p_resolution_id,
        p_hold_entry_ids, p_sent_event_id, p_sent_type, p_state_cause, p_actor, p_state_data, p_sent_snapshot) THEN
        RAISE EXCEPTION 'payout % is not % as read any more', p_payout_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;
    -- What Machine.changes writes for settled, from sent as the first step left it (row-locked).
    UPDATE payouts SET status = 'succeeded', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        bank_reference = p_bank_reference, batch_id = p_batch_id, settled_at_us = p_now_us,
        next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = 'sent' AND updated_at_us = p_event_at_us
        AND p_event_at_us < p_now_us
    RETURNING amount_minor, currency INTO moved;{_MOVED_FIRST}
    IF moved.amount_minor <> p_amount_minor OR moved.currency <> p_currency THEN
        RAISE EXCEPTION 'payout % is not the payout planned', p_payout_id USING ERRCODE = 'PC009';
    END IF;
{_STATE_EVENT.format(from_state="'sent'", to_state="'settled'")}{_POST_AND_ADJUST}{_AUDIT_EVENT}END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for create in (_CREATE_POST, _CREATE_ADJUST, _CREATE_RETURN_PAYOUT, _CREATE_SETTLE_WAITING_PAYOUT):
            op.execute(create)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in (_SETTLE_WAITING_PAYOUT, _RETURN_PAYOUT, _ADJUST, _POST):
            op.execute(f"DROP FUNCTION {signature}")
