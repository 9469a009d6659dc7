"""PostgreSQL only: `paycore_payments_accept`, a payment's first phase in one call (ADR 0026
step 3).

A payment's accept (`paycore.payments.service._start`) was eleven statements through
SQLAlchemy Core in one transaction: the key's claim (open: no answer yet), the destination
account's read, the processor clearing account's read (and its creation on first use), the
pending transfer, the two accounts' totals, the entries, the payment `processing` and its
birth event. This function writes all of them from the plan `paycore.payments.accept_plan`
made, in one prepared call in autocommit (ADR 0011's way): the key claimed first (queued on its
advisory lock as every claim is, revision 0020) with no answer, the tenant's clearing account
of the currency created where missing (`ON CONFLICT DO NOTHING`: the unique (code, tenant_id)
picks one winner), the transfer (owned by the payment: revision 0024's triggers accept its
entry on the system account), the two accounts' pending totals updated in id order (the
reference path's lock order) with the checks of `paycore.ledger.postings._apply` (the range,
the balance limit of revision 0010, the overdraft flag: copies of that rule, listed in
`paycore.ledger.limits`, as revision 0026's credit copies them), each account's entry numbered
with its next sequence number, the payment and its event (the trigger of revision 0015 queues
it for the tenant's webhook endpoints, as for every published event).

It commits a success only. It returns false, having written nothing, when the key exists; it
raises PC010 (nothing written) when the destination is missing, holds another currency or is
the clearing account itself, and PC001/PC002/PC003 on a limit: the caller then runs the
reference path, which replays or waits on the key, refuses a reused key, or records the
refusal, as it always has. Every statement filters by `p_tenant_id`, its first argument (a
distributed PostgreSQL can run the call on the tenant's node).

New function only: code of 0023-0026 never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.payments.accept_repository`'s).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_SIGNATURE = (
    "paycore_payments_accept(text, text, text, bigint, text, text, text, bigint, text, text, text, text[], text,"
    " text, text, text, text, bigint, text, text, text, text, text, text, text)"
)

_CREATE = f"""
CREATE FUNCTION paycore_payments_accept(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_now_us bigint,
    p_payment_id text,
    p_transfer_id text,
    p_currency text,
    p_amount_minor bigint,
    p_destination_id text,
    -- the clearing account: the id it gets if created, its code
    p_clearing_id text,
    p_clearing_code text,
    -- the entries' ids: the clearing account's (debited), the destination's (credited)
    p_entry_ids text[],
    p_source_type text,
    p_source_token text,
    p_description text,
    p_metadata text,
    p_status text,
    p_next_attempt_at_us bigint,
    -- the payment's birth event (its data and snapshot as paycore.audit encodes them)
    p_event_id text,
    p_event_type text,
    p_event_to_state text,
    p_event_cause text,
    p_event_actor text,
    p_event_data text,
    p_event_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    account record;
    slot integer;
    delta_debit bigint;
    delta_credit bigint;
    debits_posted bigint;
    credits_posted bigint;
    debits_pending bigint;
    credits_pending bigint;
    count_after bigint;
    figures_after numeric[];
    figures_before numeric[];
    seen integer[] := ARRAY[]::integer[];
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_now_us, NULL)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays, waits or refuses it
    END IF;

    INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, system, metadata,
        debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,
        created_at_us)
    VALUES (p_tenant_id, p_clearing_id, p_clearing_code, p_currency, 'debit', false, true, '{{}}', 0, 0, 0, 0, 0,
        p_now_us)
    ON CONFLICT (code, tenant_id) DO NOTHING;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, 'pending', NULL, NULL, NULL, NULL, 'payment', p_payment_id, p_payment_id,
        '{{}}', NULL, p_now_us);

    -- In id order, as every transfer locks its accounts: no deadlock with the reference path.
    FOR account IN
        SELECT a.id, a.code, a.currency, a.normal_balance, a.no_overdraft, a.system FROM ledger_accounts a
        WHERE a.tenant_id = p_tenant_id AND (a.id = p_destination_id OR a.code = p_clearing_code)
        ORDER BY a.id
    LOOP
        IF account.id = p_destination_id AND account.code = p_clearing_code THEN
            RAISE EXCEPTION 'the destination is the processor clearing account' USING ERRCODE = 'PC010';
        END IF;
        slot := CASE WHEN account.code = p_clearing_code THEN 1 ELSE 2 END;
        IF slot = 1 AND (account.currency <> p_currency OR account.normal_balance <> 'debit' OR NOT account.system)
        THEN
            RAISE EXCEPTION 'account % is not the processor clearing account %', account.id, p_clearing_code
                USING ERRCODE = 'PC009';
        END IF;
        IF slot = 2 AND account.currency <> p_currency THEN
            RAISE EXCEPTION 'the destination holds %, the payment is in %', account.currency, p_currency
                USING ERRCODE = 'PC010';
        END IF;
        delta_debit := CASE WHEN slot = 1 THEN p_amount_minor ELSE 0 END;
        delta_credit := p_amount_minor - delta_debit;
        UPDATE ledger_accounts SET
            debits_pending_minor = debits_pending_minor + delta_debit,
            credits_pending_minor = credits_pending_minor + delta_credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND id = account.id
            AND debits_pending_minor <= total_max - delta_debit
            AND credits_pending_minor <= total_max - delta_credit
        RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range', account.id
                USING ERRCODE = 'PC001', DETAIL = account.id;
        END IF;
        figures_after := paycore_balance_figures(account.normal_balance, debits_posted, credits_posted,
            debits_pending, credits_pending);
        figures_before := paycore_balance_figures(account.normal_balance, debits_posted, credits_posted,
            debits_pending - delta_debit, credits_pending - delta_credit);
        FOR k IN 1 .. 4 LOOP
            IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', account.id
                    USING ERRCODE = 'PC003', DETAIL = account.id;
            END IF;
        END LOOP;
        IF account.no_overdraft AND (
            (account.normal_balance = 'credit' AND credits_posted - debits_posted - debits_pending < 0)
            OR (account.normal_balance = 'debit' AND debits_posted - credits_posted - credits_pending < 0)) THEN
            RAISE EXCEPTION 'account % has insufficient available funds', account.id
                USING ERRCODE = 'PC002', DETAIL = account.id;
        END IF;
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        VALUES (p_tenant_id, p_entry_ids[slot], p_transfer_id, account.id,
            CASE WHEN slot = 1 THEN 'debit' ELSE 'credit' END, p_amount_minor, p_currency, count_after,
            p_now_us);
        seen := seen || slot;
    END LOOP;
    IF NOT (2 = ANY (seen)) THEN
        RAISE EXCEPTION 'no destination account %', p_destination_id USING ERRCODE = 'PC010';
    END IF;
    IF cardinality(seen) <> 2 THEN
        RAISE EXCEPTION 'a payment holds on two accounts, found %', cardinality(seen) USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO payments (tenant_id, id, idempotency_key, amount_minor, currency, source_type, source_token,
        destination_account_id, description, metadata, status, failure_code, processor_request_id,
        processor_reference, transfer_id, refunded_minor, attempts, next_attempt_at_us, claimed_by,
        claimed_until_us, in_doubt_since_us, fault_code, faulted_at_us, created_at_us, updated_at_us)
    VALUES (p_tenant_id, p_payment_id, p_key, p_amount_minor, p_currency, p_source_type, p_source_token,
        p_destination_id, p_description, p_metadata, p_status, NULL, p_payment_id, NULL, p_transfer_id, 0, 0,
        p_next_attempt_at_us, NULL, NULL, NULL, NULL, NULL, p_now_us, p_now_us);

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_id, 'state_change', p_event_type, 'payment', p_payment_id, NULL, p_event_to_state,
        p_event_cause, p_event_actor, p_event_data, 1, p_event_snapshot, p_now_us);
    RETURN true;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
