"""PostgreSQL only: the bank's webhook that settles a sent payout, in one call (ADR 0026 step 3).

A payout event saying `settled` for a payout `sent` (the usual order: the bank accepted it into a
batch, then settled it). The reference path (`inbound.service.receive`) stores the event, reads
the payout FOR UPDATE, moves it to `settled` (the compare-and-set; `money.pay_out`: a posted
transfer from the in-transit account to the bank's cash; the state event), books the bank's fee
(`lifecycle.record_bank_fee`: a posted transfer from the fees account to the bank's cash, the
`bank:fee` adjustment and its audit event), records the event on the payout's audit log and sets
the stored event's status: about twenty statements and a commit.

- `paycore_inbound_settle_payout`, new: the event stored (`applied`, tried once, done; a
  redelivery writes nothing and answers `duplicate`), the compare-and-set (the payout as read:
  status, time, attempts, bank reference, batch and failure code, since the state event's
  snapshot is made from that read; the columns `Machine.changes` writes for `settled`; PC013 where
  it moved first), the transfers, each entry's account by its code (its totals, the range, the
  balance limit and no overdraft checked as `paycore_hold_resolve` checks them; its number the
  account's entry count), the entries, the state event, the fee's adjustment (PC013 where the
  payout has one) and its audit event, the webhook's audit event. Every statement filters by
  `p_tenant_id`, its first argument. PC013 and the refusals (PC001-PC003, PC009) undo the whole
  call, and the caller takes the reference path.

A new function only: the release before never calls it, and this release falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops it. SQLite: nothing (its statements are
`paycore.payouts.settlement_repository`'s).

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06 20:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None

_SETTLE_PAYOUT = (
    "paycore_inbound_settle_payout(text, text, text, text, text, text, text, bigint, bigint, text, text, text,"
    " bigint, text, text, bigint, text, text[], text[], text[], text[], text[], text[], bigint[], text, bigint,"
    " text, text, text, text, text, text, text, text, text, text, text, text, text)"
)

_CREATE_SETTLE_PAYOUT = """
CREATE FUNCTION paycore_inbound_settle_payout(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
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
    -- the payout as the move leaves it: settled
    p_now_us bigint,
    p_bank_reference text,
    p_batch_id text,
    p_amount_minor bigint,
    p_currency text,
    -- the posted transfers (the payout's; the fee's) and their entries, each account by its code
    p_transfer_ids text[],
    p_reference_types text[],
    p_entry_ids text[],
    p_entry_transfer_ids text[],
    p_entry_codes text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    -- the bank's fee (NULLs for none): the adjustment and its audit event
    p_adjustment_id text,
    p_fee_minor bigint,
    p_effective_on text,
    p_adjustment_event_id text,
    p_adjustment_data text,
    -- the state event
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
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    moved record;
    account record;
    debit bigint;
    credit bigint;
    figures_after numeric[];
    figures_before numeric[];
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payout_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    -- What Machine.changes writes for settled (paycore.payouts.lifecycle._columns_of): the schedule
    -- cleared (returns come by webhook: nothing left to poll for), settled_at_us.
    UPDATE payouts SET status = 'succeeded', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        bank_reference = p_bank_reference, batch_id = p_batch_id, settled_at_us = p_now_us,
        next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = p_expected_status
        AND updated_at_us = p_expected_updated_at_us AND updated_at_us < p_now_us AND attempts = p_expected_attempts
        AND bank_reference IS NOT DISTINCT FROM p_expected_bank_reference
        AND batch_id IS NOT DISTINCT FROM p_expected_batch_id
        AND failure_code IS NOT DISTINCT FROM p_expected_failure_code
    RETURNING amount_minor, currency INTO moved;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payout % is not % as read any more', p_payout_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;
    IF moved.amount_minor <> p_amount_minor OR moved.currency <> p_currency THEN
        RAISE EXCEPTION 'payout % is not the payout planned', p_payout_id USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    SELECT p_tenant_id, t.id, 'transfer', NULL, NULL, NULL, NULL, t.reference_type, p_payout_id, p_payout_id, '{}',
        NULL, p_now_us
    FROM unnest(p_transfer_ids, p_reference_types) AS t(id, reference_type);

    -- Each entry's account in the reference path's order (each transfer's, then the next's).
    FOR k IN 1 .. coalesce(array_length(p_entry_ids, 1), 0) LOOP
        debit := CASE WHEN p_entry_directions[k] = 'debit' THEN p_entry_amounts[k] ELSE 0 END;
        credit := p_entry_amounts[k] - debit;
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + debit,
            credits_posted_minor = credits_posted_minor + credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND code = p_entry_codes[k] AND currency = p_currency
            AND debits_posted_minor <= total_max - debit AND credits_posted_minor <= total_max - credit
        RETURNING ledger_accounts.id, ledger_accounts.normal_balance, ledger_accounts.no_overdraft,
            debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO account;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % is missing or would leave its balance range', p_entry_codes[k]
                USING ERRCODE = 'PC001', DETAIL = p_entry_codes[k];
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
            p_entry_amounts[k], p_currency, account.entries_count, p_now_us);
    END LOOP;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_state_event_id, 'state_change', p_state_type, 'payout', p_payout_id,
        p_expected_status, 'settled', p_state_cause, p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payout_id),
        p_snapshot, p_now_us);

    IF p_adjustment_id IS NOT NULL THEN  -- lifecycle.record_bank_fee: a fee above zero only
        INSERT INTO payout_adjustments (tenant_id, id, payout_id, kind, amount_minor, currency, code, effective_on,
            source, dedupe_key, transfer_id, note, created_at_us)
        VALUES (p_tenant_id, p_adjustment_id, p_payout_id, 'fee', p_fee_minor, p_currency, NULL, p_effective_on,
            'bank', 'bank:fee', p_transfer_ids[2], NULL, p_now_us)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'payout % has its bank''s fee already', p_payout_id USING ERRCODE = 'PC013';
        END IF;
        INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
            data, created_at_us)
        VALUES (p_tenant_id, p_adjustment_event_id, 'adjustment', 'payout.adjustment.fee', 'payout', p_payout_id,
            NULL, NULL, 'bank', p_actor, p_adjustment_data, p_now_us);
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payout', p_payout_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_SETTLE_PAYOUT)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SETTLE_PAYOUT}")
