"""PostgreSQL only: `paycore_payments_settle`, a payment's settle phase in one call (ADR 0026
step 3).

After the processor answered, the creating request's second transaction was a dozen statements
through SQLAlchemy Core: the payment read FOR UPDATE, the call's audit event, the
compare-and-set, the hold read back, its post or void transfer, the accounts' facts, two totals,
the entries, the state event, the payment's events read back for the answer's history, and the
key's answer. This function writes all of them from the plan `paycore.payments.settle_plan`
made, in one prepared call in autocommit (ADR 0011's way), in the reference path's lock order:
the payment's row (by the compare-and-set, `UPDATE ... WHERE status = 'processing'`, which a
webhook's or the resolver's `SELECT ... FOR UPDATE` queues behind, and which finds nothing once
either moved it first), the call's event, the hold's resolution (the unique (tenant_id,
pending_id) index: one resolution ever), the hold's accounts in id order with the checks of
`paycore.ledger.postings._apply` (the range, the balance limit of revision 0010 when entries
are added, the overdraft guard: copies of that rule, listed in `paycore.ledger.limits`), the
entries numbered with each account's next sequence numbers (posted only), the state event
numbered after the payment's last published one (the trigger of revision 0015 queues it), and
the key's answer where none is recorded.

It commits a success only, and returns the hold's two accounts as it left them (the ledger's
cache of facts keeps them, as the reference path's read of them did). It returns no row, having
written nothing, when the compare-and-set finds the payment moved (the caller then runs the reference path: it records the call, finds
the state changed, and replays the recorded answer); it raises PC001-PC004 on a refusal
(nothing written), and PC009 when the hold is not what the plan says (a programmer's error).
Every statement filters by `p_tenant_id`, its first argument.

New function only: earlier code never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.payments.settle_repository`'s).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

_SIGNATURE = (
    "paycore_payments_settle(text, text, text, bigint, text, text, text, text, bigint, text, text, boolean, text,"
    " text[], text[], text[], text[], text, text, text, text, integer, text)"
)

_CREATE = """
CREATE FUNCTION paycore_payments_settle(
    p_tenant_id text,
    p_payment_id text,
    p_key text,
    p_now_us bigint,
    p_expected_status text,
    p_status text,
    p_failure_code text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_transfer_id text,
    p_destination_account_id text,
    p_post boolean,
    p_resolution_id text,
    -- posted only: the entries' ids (processor clearing debited, destination credited)
    p_entry_ids text[],
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
) RETURNS TABLE (
    -- the hold's two accounts as the call leaves them (the ledger's cache of facts keeps them);
    -- no row when the compare-and-set found the payment moved
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
    added integer := CASE WHEN p_post THEN 1 ELSE 0 END;
    figures_after numeric[];
    figures_before numeric[];
    updated integer := 0;
BEGIN
    UPDATE payments SET status = p_status, updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        processor_reference = p_processor_reference, failure_code = p_failure_code, next_attempt_at_us = NULL,
        claimed_by = NULL, claimed_until_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = p_expected_status
        AND updated_at_us < p_now_us
    RETURNING idempotency_key, amount_minor, transfer_id, destination_account_id INTO moved;
    IF NOT FOUND THEN
        RETURN;  -- moved first (a webhook, the resolver): the caller's reference path replays it
    END IF;
    IF moved.idempotency_key <> p_key OR moved.amount_minor <> p_amount_minor OR moved.transfer_id <> p_transfer_id
        OR moved.destination_account_id <> p_destination_account_id THEN
        RAISE EXCEPTION 'payment % is not the payment planned', p_payment_id USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);

    -- The hold by its primary key alone, its kind checked here: with `kind` in the WHERE clause a
    -- generic plan made without statistics searched (kind, expires_at_us), every pending
    -- transfer of every tenant (tests/integration/plans/).
    SELECT t.kind, t.owner_id, t.expires_at_us, t.reference_type, t.reference_id INTO hold
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_transfer_id;
    IF NOT FOUND OR hold.kind <> 'pending' OR hold.owner_id IS DISTINCT FROM p_payment_id
        OR hold.expires_at_us IS NOT NULL THEN
        RAISE EXCEPTION 'the hold % is not this payment''s pending transfer', p_transfer_id
            USING ERRCODE = 'PC004';
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
        IF held.amount_minor <> p_amount_minor
            OR (held.direction = 'credit') <> (held.account_id = p_destination_account_id) THEN
            RAISE EXCEPTION 'the hold % is not the payment''s', p_transfer_id USING ERRCODE = 'PC009';
        END IF;
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
        IF p_post THEN  -- only entries move money: releasing a hold is never refused by the limit
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
                p_resolution_id, held.account_id, held.direction, held.amount_minor, out_currency, out_entries_count,
                p_now_us);
        END IF;
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
        p_expected_status, p_status, p_event_causes[2], p_actor, p_state_data,
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
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
