"""PostgreSQL only: `paycore_payouts_create`, a payout's creating phase in one call (ADR 0026
step 3).

A payout's creation (`POST /v1/payouts`: `paycore.payouts.service.schedule` and the request's
`api_call` event, inside `idempotency.run`) was 17 statements through SQLAlchemy Core in one
transaction: the key's claim, the source account's read, the four payout system accounts' read
(and their creation on first use, and a second read), the pending transfer (the hold), the two
accounts' totals, the entries, the payout `scheduled`, its birth event, the `api_call` event,
the history's read and the key's answer. This function writes all of them from the plan
`paycore.payouts.create_plan` made, in one prepared call in autocommit (ADR 0011's way): the
key claimed first (queued on its advisory lock as every claim is, revision 0020) with its
answer, the tenant's four payout accounts of the currency created where missing (`ON CONFLICT
DO NOTHING`: the unique (code, tenant_id) picks one winner), the transfer (owned by the payout:
revision 0024's triggers accept its entry on the system account), the two accounts' pending
totals updated in id order (the reference path's lock order) with the checks of
`paycore.ledger.postings._apply` (the range, the balance limit of revision 0010, and the
overdraft rule on a flagged account and on the source, which the hold guards: its available
balance never below zero, checked under the row lock its UPDATE took; copies of that rule,
listed in `paycore.ledger.limits`), each account's entry numbered with its next sequence
number, the payout and its two events (the birth, published: the trigger of revision 0015
queues it for the tenant's webhook endpoints; the `api_call`, not published).

It commits a success only. It returns false, having written nothing, when the key exists; it
raises PC010 (nothing written) when the source is missing, holds another currency, is a system
account or the in-transit account itself, PC002 when the source's available balance is short,
and PC001/PC003 on a limit: the caller then runs the reference path, which replays or refuses
the key, or refuses and records the request, as it always has. Every statement filters by
`p_tenant_id`, its first argument (a distributed PostgreSQL can run the call on the tenant's
node). No message names a beneficiary's account number or IBAN.

New function only: code of 0023-0027 never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.payouts.create_repository`'s).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_SIGNATURE = (
    "paycore_payouts_create(text, text, text, bigint, integer, text, text, text, text, bigint, text, text[],"
    " text[], text[], text, text[], text, text, text, text, text, text, text, text, text, text, text[], text[],"
    " text[], text[], text)"
)

_CREATE = f"""
CREATE FUNCTION paycore_payouts_create(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_now_us bigint,
    -- the key's answer (201 and the payout's JSON), stored with its claim
    p_response_status integer,
    p_response_body text,
    p_payout_id text,
    p_transfer_id text,
    p_currency text,
    p_amount_minor bigint,
    p_source_id text,
    -- the four payout system accounts: the ids they get if created, their codes, normal balances
    p_account_ids text[],
    p_account_codes text[],
    p_account_normals text[],
    p_in_transit_code text,
    -- the entries' ids: the source's (debited), in transit's (credited)
    p_entry_ids text[],
    p_rail text,
    p_beneficiary_name text,
    p_iban text,
    p_bic text,
    p_routing_number text,
    p_account_number text,
    p_execute_on text,
    p_metadata text,
    -- the two events (the birth, the api_call; data and snapshot as paycore.audit encodes them)
    p_actor text,
    p_to_state text,
    p_event_ids text[],
    p_event_types text[],
    p_event_data text[],
    p_event_causes text[],
    p_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    account record;
    slot integer;
    guarded boolean;
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
    VALUES (p_tenant_id, p_key, p_fingerprint, p_response_status, p_response_body, p_now_us, NULL)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays or refuses it
    END IF;

    INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, system, metadata,
        debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,
        created_at_us)
    SELECT p_tenant_id, a.id, a.code, p_currency, a.normal_balance, false, true, '{{}}', 0, 0, 0, 0, 0, p_now_us
    FROM unnest(p_account_ids, p_account_codes, p_account_normals) AS a(id, code, normal_balance)
    ON CONFLICT (code, tenant_id) DO NOTHING;  -- each probes the unique index: no read of the tenant's others

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, 'pending', NULL, NULL, NULL, NULL, 'payout', p_payout_id, p_payout_id,
        '{{}}', NULL, p_now_us);

    -- In id order, as every transfer locks its accounts: no deadlock with the reference path.
    FOR account IN
        SELECT a.id, a.code, a.currency, a.normal_balance, a.no_overdraft, a.system FROM ledger_accounts a
        WHERE a.tenant_id = p_tenant_id AND (a.id = p_source_id OR a.code = p_in_transit_code)
        ORDER BY a.id
    LOOP
        IF account.id = p_source_id AND (account.system OR account.currency <> p_currency) THEN
            RAISE EXCEPTION 'the source is a system account or holds another currency' USING ERRCODE = 'PC010';
        END IF;
        slot := CASE WHEN account.id = p_source_id THEN 1 ELSE 2 END;
        IF slot = 2 AND (account.currency <> p_currency OR account.normal_balance <> 'credit' OR NOT account.system)
        THEN
            RAISE EXCEPTION 'account % is not the in-transit account %', account.id, p_in_transit_code
                USING ERRCODE = 'PC009';
        END IF;
        guarded := account.no_overdraft OR slot = 1;  -- the hold guards its source's available balance
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
        IF guarded AND (
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
    IF NOT (1 = ANY (seen)) THEN
        RAISE EXCEPTION 'no source account %', p_source_id USING ERRCODE = 'PC010';
    END IF;
    IF cardinality(seen) <> 2 THEN
        RAISE EXCEPTION 'a payout holds on two accounts, found %', cardinality(seen) USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO payouts (tenant_id, id, idempotency_key, amount_minor, currency, rail, source_account_id,
        beneficiary_name, iban, bic, routing_number, account_number, execute_on, metadata, status, failure_code,
        return_code, transfer_id, bank_reference, batch_id, attempts, next_attempt_at_us, claimed_by,
        claimed_until_us, in_doubt_since_us, fault_code, faulted_at_us, sent_at_us, settled_at_us, returned_at_us,
        created_at_us, updated_at_us)
    VALUES (p_tenant_id, p_payout_id, p_key, p_amount_minor, p_currency, p_rail, p_source_id, p_beneficiary_name,
        p_iban, p_bic, p_routing_number, p_account_number, p_execute_on, p_metadata, 'scheduled', NULL, NULL,
        p_transfer_id, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, p_now_us, p_now_us);

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'state_change', p_event_types[1], 'payout', p_payout_id, NULL, p_to_state,
        p_event_causes[1], p_actor, p_event_data[1], 1, p_snapshot, p_now_us),
        (p_tenant_id, p_event_ids[2], 'api_call', p_event_types[2], 'payout', p_payout_id, NULL, NULL,
        p_event_causes[2], p_actor, p_event_data[2], NULL, NULL, p_now_us);
    RETURN true;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
