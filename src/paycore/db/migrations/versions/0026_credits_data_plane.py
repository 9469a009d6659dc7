"""PostgreSQL only: `paycore_credits_create`, a credit in one call (ADR 0026).

A credit (SPEC §5) was about a dozen statements through SQLAlchemy Core inside
`idempotency.run`: the key's claim, the accounts' read (and their creation on first use), the
transfer, the two accounts' totals, the entries, the credit and the key's answer. This
function writes all of them from the plan `paycore.credits.plan` made, in one prepared call
in autocommit (ADR 0011's way): the key claimed first (queued on its advisory lock as every
claim is, revision 0020) with its answer, the tenant's two credits accounts created where
missing (`ON CONFLICT DO NOTHING`: the unique (code, tenant_id) picks one winner), their totals
updated in id order (the reference path's lock order) with the checks of
`paycore.ledger.postings._apply` (the range, the balance limit of revision 0010, the overdraft
guard: copies of that rule, listed in `paycore.ledger.limits` and held to it by
tests/integration/http/test_credits.py's balance past the limit), the transfer (owned by the credit: revision 0024's triggers
accept its entries on the system accounts), its entries numbered with each account's next
sequence numbers, and the credit's row.

It commits a success only. It returns false, having written nothing, when the key exists; it
raises PC001/PC002/PC003 on a refusal (nothing written): the caller then runs the reference
path, which replays, refuses a reused key, or records the refusal, as it always has. Every
statement filters by `p_tenant_id`, its first argument (a distributed PostgreSQL can run the
call on the tenant's node).

New function only: code of 0023-0025 never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.credits.create_repository`'s).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 05:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_SIGNATURE = (
    "paycore_credits_create(text, text, text, bigint, text, text, text, bigint, text, text[], text[], text[],"
    " boolean[], text[], integer, text)"
)

_CREATE = f"""
CREATE FUNCTION paycore_credits_create(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_now_us bigint,
    p_credit_id text,
    p_transfer_id text,
    p_currency text,
    p_amount_minor bigint,
    p_lines text,
    -- the two accounts (issued, then balance): the ids they get if created, codes, normals, flags
    p_account_ids text[],
    p_account_codes text[],
    p_normal_balances text[],
    p_no_overdraft boolean[],
    -- the entries' ids, in the accounts' order (issued debited, balance credited)
    p_entry_ids text[],
    p_response_status integer,
    p_response_body text
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
    updated integer := 0;
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
    SELECT p_tenant_id, a.id, a.code, p_currency, a.normal_balance, a.no_overdraft, true, '{{}}', 0, 0, 0, 0, 0,
        p_now_us
    FROM unnest(p_account_ids, p_account_codes, p_normal_balances, p_no_overdraft)
        AS a(id, code, normal_balance, no_overdraft)
    ON CONFLICT (code, tenant_id) DO NOTHING;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, 'transfer', NULL, NULL, NULL, p_key, 'credit', p_credit_id, p_credit_id,
        '{{}}', NULL, p_now_us);

    -- In id order, as every transfer locks its accounts: no deadlock with the reference path.
    FOR account IN
        SELECT a.id, a.code, a.currency, a.normal_balance, a.system FROM ledger_accounts a
        WHERE a.tenant_id = p_tenant_id AND a.code = ANY (p_account_codes)
        ORDER BY a.id
    LOOP
        slot := array_position(p_account_codes, account.code);
        IF account.currency <> p_currency OR account.normal_balance <> p_normal_balances[slot]
            OR NOT account.system THEN
            RAISE EXCEPTION 'account % is not the credits account %', account.id, account.code
                USING ERRCODE = 'PC009';
        END IF;
        delta_debit := CASE WHEN slot = 1 THEN p_amount_minor ELSE 0 END;
        delta_credit := p_amount_minor - delta_debit;
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + delta_debit,
            credits_posted_minor = credits_posted_minor + delta_credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND id = account.id
            AND debits_posted_minor <= total_max - delta_debit
            AND credits_posted_minor <= total_max - delta_credit
        RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range', account.id
                USING ERRCODE = 'PC001', DETAIL = account.id;
        END IF;
        figures_after := paycore_balance_figures(account.normal_balance, debits_posted, credits_posted,
            debits_pending, credits_pending);
        figures_before := paycore_balance_figures(account.normal_balance, debits_posted - delta_debit,
            credits_posted - delta_credit, debits_pending, credits_pending);
        FOR k IN 1 .. 4 LOOP
            IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', account.id
                    USING ERRCODE = 'PC003', DETAIL = account.id;
            END IF;
        END LOOP;
        IF p_no_overdraft[slot] AND (
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
        updated := updated + 1;
    END LOOP;
    IF updated <> 2 THEN
        RAISE EXCEPTION 'a credit moves two accounts, found %', updated USING ERRCODE = 'PC009';
    END IF;

    INSERT INTO credits (tenant_id, id, idempotency_key, currency, amount_minor, lines, transfer_id, created_at_us)
    VALUES (p_tenant_id, p_credit_id, p_key, p_currency, p_amount_minor, p_lines, p_transfer_id, p_now_us);
    RETURN true;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
