"""PostgreSQL only: a processor webhook that settles a refund, in one call (ADR 0026 step 3).

A refund event saying `succeeded` or `failed` for a refund still `processing` (the processor
answered `pending`) or `in_doubt` (its answer was lost) settles it. The reference path
(`inbound.service.receive`) stores the event, reads the refund FOR UPDATE, moves it (the
compare-and-set, the ceiling's release on a failure, the hold posted or voided with its accounts
and entries, the state event), records the event on the refund's audit log and sets the stored
event's status: a dozen statements and a commit.

- `paycore_hold_resolve`, new: a two-entry hold (one account debited, one credited, of the same
  amount) posted whole or voided: the resolution made from the hold itself (its owner's, pending,
  without expiry, unresolved: PC004), its accounts in id order released (and, posted, moved by an
  entry each) under the ledger's range, balance limit and overdraft checks (PC001-PC003, as
  `paycore_payments_settle`'s copy of them, which stays as it is). A refund's settle calls it, and
  a payout's (0043); the SQLite twin is `paycore.ledger.hold_repository.resolve`.
- `paycore_refunds_settle`, new: a refund's move to what the processor proved (the plan of
  `paycore.refunds.settle_plan`), the one home of it on PostgreSQL: the compare-and-set (the
  refund as read: status, time, reference and failure code, since the state event's snapshot is
  made from that read), the ceiling's release on the payment's row (a failure), the hold's
  resolution (`paycore_hold_resolve`), the state event. FALSE, having written nothing, when the refund moved first.
- `paycore_inbound_confirm_refund`, new: the plain case, a refund event for a refund already in
  the status it proves (its amount and currency): the event stored `stale` (a redelivery writes
  nothing and answers `duplicate`), the refund locked and checked (else PC013), the audit event.
- `paycore_inbound_apply_refund`, new: the event stored (`applied`, tried once, done; a
  redelivery writes nothing and answers `duplicate`), `paycore_refunds_settle` (FALSE: PC013),
  the event on the refund's audit log (`applied`). PC013 and the refusals (PC001-PC004, PC009)
  undo the whole call, and the caller takes the reference path. The reference path's lock
  order: the stored event's key, the refund's row, the payment's row, the hold's resolution, its
  accounts in id order. Every statement filters by `p_tenant_id`, its first argument.

New functions only: the release before never calls them, and this release falls back to the
reference path where they do not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops them. SQLite: nothing (its statements are
`paycore.inbound.apply_refund_repository`'s and `paycore.refunds.settle_repository`'s).

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-06 17:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None

_HOLD_RESOLVE = "paycore_hold_resolve(text, text, text, bigint, boolean, text, text[], bigint)"
_SETTLE = (
    "paycore_refunds_settle(text, text, text, bigint, text, text, bigint, text, text, text, bigint, text, text,"
    " boolean, bigint, text, text[], text, text, text, text, text, text)"
)
_APPLY = (
    "paycore_inbound_apply_refund(text, text, text, text, text, text, text, bigint, text, text, bigint, text, text,"
    " text, bigint, text, text, boolean, bigint, text, text[], text, text, text, text, text, text, text, text, text,"
    " text)"
)

_CONFIRM = (
    "paycore_inbound_confirm_refund(text, text, text, text, text, bigint, text, text, bigint, text, text, text, text,"
    " text, text)"
)

_CREATE_HOLD_RESOLVE = """
CREATE FUNCTION paycore_hold_resolve(
    p_tenant_id text,
    p_transfer_id text,  -- the hold: two entries of p_amount_minor, one each way
    p_owner_id text,
    p_amount_minor bigint,
    p_post boolean,
    p_resolution_id text,
    p_entry_ids text[],  -- posted only: (the debit's, the credit's)
    p_now_us bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    hold record;
    held record;
    account record;
    posted_debit bigint;
    posted_credit bigint;
    pending_debit bigint;
    pending_credit bigint;
    added integer := CASE WHEN p_post THEN 1 ELSE 0 END;
    figures_after numeric[];
    figures_before numeric[];
    sides text := '';
BEGIN
    -- The hold by its primary key alone, its kind checked here (as paycore_payments_settle).
    SELECT t.kind, t.owner_id, t.expires_at_us, t.reference_type, t.reference_id INTO hold
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_transfer_id;
    IF NOT FOUND OR hold.kind <> 'pending' OR hold.owner_id IS DISTINCT FROM p_owner_id
        OR hold.expires_at_us IS NOT NULL THEN
        RAISE EXCEPTION 'the hold % is not its owner''s pending transfer', p_transfer_id USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_resolution_id, CASE WHEN p_post THEN 'post' ELSE 'void' END, p_transfer_id, NULL, NULL,
        NULL, hold.reference_type, hold.reference_id, hold.owner_id, '{}', NULL, p_now_us)
    ON CONFLICT (tenant_id, pending_id) WHERE pending_id IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the hold % is resolved already', p_transfer_id USING ERRCODE = 'PC004';
    END IF;

    -- The hold's accounts in id order, as every transfer locks them: no deadlock with the
    -- reference path. Each is released (and, posted, moved) by exactly the hold's entry.
    FOR held IN
        SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
        WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
        ORDER BY e.account_id
    LOOP
        IF held.amount_minor <> p_amount_minor THEN
            RAISE EXCEPTION 'the hold % is not its owner''s', p_transfer_id USING ERRCODE = 'PC009';
        END IF;
        sides := sides || held.direction;
        pending_debit := CASE WHEN held.direction = 'debit' THEN held.amount_minor ELSE 0 END;
        pending_credit := held.amount_minor - pending_debit;
        posted_debit := pending_debit * added;
        posted_credit := pending_credit * added;
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + posted_debit,
            credits_posted_minor = credits_posted_minor + posted_credit,
            debits_pending_minor = debits_pending_minor - pending_debit,
            credits_pending_minor = credits_pending_minor - pending_credit,
            entries_count = ledger_accounts.entries_count + added
        WHERE tenant_id = p_tenant_id AND id = held.account_id
            AND debits_posted_minor <= total_max - posted_debit
            AND credits_posted_minor <= total_max - posted_credit
        RETURNING ledger_accounts.currency, ledger_accounts.normal_balance, ledger_accounts.no_overdraft,
            debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO account;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range', held.account_id
                USING ERRCODE = 'PC001', DETAIL = held.account_id;
        END IF;
        IF p_post THEN  -- only entries move money: releasing a hold is never refused by the limit
            figures_after := paycore_balance_figures(account.normal_balance, account.debits_posted_minor,
                account.credits_posted_minor, account.debits_pending_minor, account.credits_pending_minor);
            figures_before := paycore_balance_figures(account.normal_balance,
                account.debits_posted_minor - posted_debit, account.credits_posted_minor - posted_credit,
                account.debits_pending_minor + pending_debit, account.credits_pending_minor + pending_credit);
            FOR k IN 1 .. 4 LOOP
                IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                    RAISE EXCEPTION 'account % would pass the balance limit', held.account_id
                        USING ERRCODE = 'PC003', DETAIL = held.account_id;
                END IF;
            END LOOP;
            INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
                account_sequence, created_at_us)
            VALUES (p_tenant_id, p_entry_ids[CASE WHEN held.direction = 'debit' THEN 1 ELSE 2 END],
                p_resolution_id, held.account_id, held.direction, held.amount_minor, account.currency,
                account.entries_count, p_now_us);
        END IF;
        IF account.no_overdraft AND (
            (account.normal_balance = 'credit'
                AND account.credits_posted_minor - account.debits_posted_minor - account.debits_pending_minor < 0)
            OR (account.normal_balance = 'debit'
                AND account.debits_posted_minor - account.credits_posted_minor - account.credits_pending_minor < 0))
        THEN
            RAISE EXCEPTION 'account % has insufficient available funds', held.account_id
                USING ERRCODE = 'PC002', DETAIL = held.account_id;
        END IF;
    END LOOP;
    IF sides NOT IN ('debitcredit', 'creditdebit') THEN
        RAISE EXCEPTION 'a hold moves two accounts, one each way, found %', sides USING ERRCODE = 'PC009';
    END IF;

END $$
"""

_CREATE_SETTLE = """
CREATE FUNCTION paycore_refunds_settle(
    p_tenant_id text,
    p_refund_id text,
    -- the refund as read: the compare-and-set expects it so
    p_expected_status text,
    p_expected_updated_at_us bigint,
    p_expected_reference text,
    p_expected_failure_code text,
    -- the refund as the move leaves it
    p_now_us bigint,
    p_status text,
    p_failure_code text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_payment_id text,
    p_transfer_id text,
    p_post boolean,
    p_released_minor bigint,
    p_resolution_id text,
    -- posted only: the entries' ids (the destination debited, the processor clearing credited)
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
BEGIN
    UPDATE refunds SET status = p_status, updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        processor_reference = p_processor_reference, failure_code = p_failure_code, next_attempt_at_us = NULL,
        claimed_by = NULL, claimed_until_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_refund_id AND status = p_expected_status
        AND updated_at_us = p_expected_updated_at_us AND updated_at_us < p_now_us
        AND processor_reference IS NOT DISTINCT FROM p_expected_reference
        AND failure_code IS NOT DISTINCT FROM p_expected_failure_code
    RETURNING payment_id, amount_minor, transfer_id INTO moved;
    IF NOT FOUND THEN
        RETURN false;  -- moved first (the resolver, a worker): the caller's reference path decides
    END IF;
    IF moved.payment_id <> p_payment_id OR moved.amount_minor <> p_amount_minor
        OR moved.transfer_id IS DISTINCT FROM p_transfer_id THEN
        RAISE EXCEPTION 'refund % is not the refund planned', p_refund_id USING ERRCODE = 'PC009';
    END IF;

    IF p_released_minor > 0 THEN  -- a failed refund gives its amount back (refunds.ceiling.release)
        UPDATE payments SET refunded_minor = refunded_minor - p_released_minor
        WHERE tenant_id = p_tenant_id AND id = p_payment_id AND refunded_minor >= p_released_minor;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'payment % does not hold refund %''s amount', p_payment_id, p_refund_id
                USING ERRCODE = 'PC009';
        END IF;
    END IF;

    PERFORM paycore_hold_resolve(p_tenant_id, p_transfer_id, p_refund_id, p_amount_minor, p_post, p_resolution_id,
        p_entry_ids, p_now_us);

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_state_event_id, 'state_change', p_state_type, 'refund', p_refund_id,
        p_expected_status, p_status, p_state_cause, p_actor, p_state_data,
        (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
         WHERE e.tenant_id = p_tenant_id AND e.object_id = p_refund_id),
        p_snapshot, p_now_us);
    RETURN true;
END $$
"""

_CREATE_APPLY = """
CREATE FUNCTION paycore_inbound_apply_refund(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    -- the refund's move, as paycore_refunds_settle takes it
    p_refund_id text,
    p_expected_status text,
    p_expected_updated_at_us bigint,
    p_expected_reference text,
    p_expected_failure_code text,
    p_now_us bigint,
    p_status text,
    p_failure_code text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_payment_id text,
    p_transfer_id text,
    p_post boolean,
    p_released_minor bigint,
    p_resolution_id text,
    p_entry_ids text[],
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text,
    -- the event on the refund's audit log (its data as paycore.audit encodes it), its cause p_result
    p_audit_event_id text,
    p_audit_type text,
    p_audit_data text,
    p_result text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_refund_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    IF NOT paycore_refunds_settle(p_tenant_id, p_refund_id, p_expected_status, p_expected_updated_at_us,
        p_expected_reference, p_expected_failure_code, p_now_us, p_status, p_failure_code, p_processor_reference,
        p_amount_minor, p_payment_id, p_transfer_id, p_post, p_released_minor, p_resolution_id, p_entry_ids,
        p_state_event_id, p_state_type, p_state_cause, p_actor, p_state_data, p_snapshot) THEN
        RAISE EXCEPTION 'refund % is not % as read any more', p_refund_id, p_expected_status USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'refund', p_refund_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""

_CREATE_CONFIRM = """
CREATE FUNCTION paycore_inbound_confirm_refund(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    p_now_us bigint,
    -- what the refund named must be: the status the event proves, its amount and currency
    p_refund_id text,
    p_status text,
    p_amount_minor bigint,
    p_currency text,
    -- the event on the refund's audit log (its data as paycore.audit encodes it), its cause p_result
    p_audit_event_id text,
    p_audit_type text,
    p_actor text,
    p_audit_data text,
    p_result text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_refund_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    PERFORM 1 FROM refunds
    WHERE tenant_id = p_tenant_id AND id = p_refund_id AND status = p_status AND amount_minor = p_amount_minor
        AND currency = p_currency
    FOR UPDATE;  -- the reference path's lock: nothing moves it before the commit
    IF NOT FOUND THEN
        RAISE EXCEPTION 'refund % is not % any more', p_refund_id, p_status USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'refund', p_refund_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_HOLD_RESOLVE)
        op.execute(_CREATE_SETTLE)
        op.execute(_CREATE_APPLY)
        op.execute(_CREATE_CONFIRM)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_CONFIRM}")
        op.execute(f"DROP FUNCTION {_APPLY}")
        op.execute(f"DROP FUNCTION {_SETTLE}")
        op.execute(f"DROP FUNCTION {_HOLD_RESOLVE}")
