"""PostgreSQL only: a payment's accept and settle write their two ledger entries in one INSERT,
and the accept reads the processor's clearing account before it would make it.

Measured in a PostgreSQL split deploy (docs/benchmarks.md, "The PostgreSQL backends' share"):
the backends' CPU a payment is spread over the rows' own work (index entries, triggers, the
commits), with the executor's start of each statement about a tenth of it (perf). This
revision takes out the statements that repeat a step the function already does:

- `paycore_payments_accept` (0036) inserted the hold's two entries one INSERT an account, inside
  its loop over the accounts; it now collects them in the loop and inserts both with one
  `INSERT ... SELECT ... FROM unnest(...)` after it (the form 0047's batch runs on Citus).
- `paycore_payments_settle` (0039, 0048) the same for a posted hold's two entries.
- `paycore_payments_accept` ran `INSERT ... ON CONFLICT (code, tenant_id) DO NOTHING` for the
  clearing account on every payment: a speculative insertion checked against the unique index
  and thrown away but for a tenant's first payment in a currency. It now reads the account by
  that index first and inserts only when it is missing (still `ON CONFLICT DO NOTHING`, for two
  first payments at once).

Nothing a row holds changes: the entries' ids, accounts, directions, amounts, currencies and
sequence numbers are the ones the loop computed, in the loop's (the accounts' id) order; every
check (limits, overdraft, the hold's shape) still runs before any entry is written and raises
what it raised; the entries' triggers (the system account's owner, the deferred balance) and
foreign keys still run on each row. Every statement keeps the tenant, the first argument, in
its filter, so `paycore db distribute` delegates both as before. The definitions are read from
the database and only the named passages are replaced (each must be found exactly once, else
the migration stops), as 0048 does; signatures and results are unchanged, so
OLDEST_COMPATIBLE_REVISION does not move. Downgrade writes the old passages back. SQLite:
nothing (its statements are Python's).

Revision ID: 0052
Revises: 0051
Create Date: 2026-12-07 03:00:00
"""

from __future__ import annotations

from paycore.db.function_passages import Passage, migrate_passages

revision = "0052"
down_revision = "0051"
branch_labels = None
depends_on = None


ACCEPT = ("paycore_payments_accept", 26)  # 0036's signature, with the capture method
SETTLE = ("paycore_payments_settle", 24)  # 0039's signature, with the lifetime

_ACCEPT_CLEARING_OLD = """\
    INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, system, metadata,
        debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,
        created_at_us)
    VALUES (p_tenant_id, p_clearing_id, p_clearing_code, p_currency, 'debit', false, true, '{}', 0, 0, 0, 0, 0,
        p_now_us)
    ON CONFLICT (code, tenant_id) DO NOTHING;
"""
_ACCEPT_CLEARING_NEW = """\
    -- Made by the tenant's first payment in the currency: read first, inserted only if missing (0052).
    PERFORM 1 FROM ledger_accounts a WHERE a.code = p_clearing_code AND a.tenant_id = p_tenant_id;
    IF NOT FOUND THEN
        INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, system, metadata,
            debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,
            created_at_us)
        VALUES (p_tenant_id, p_clearing_id, p_clearing_code, p_currency, 'debit', false, true, '{}', 0, 0, 0, 0, 0,
            p_now_us)
        ON CONFLICT (code, tenant_id) DO NOTHING;
    END IF;
"""
_ACCEPT_DECLARE_OLD = """\
    seen integer[] := ARRAY[]::integer[];
BEGIN
"""
_ACCEPT_DECLARE_NEW = """\
    seen integer[] := ARRAY[]::integer[];
    entry_accounts text[] := ARRAY[]::text[];  -- by the loop, in `seen`'s order (0052)
    entry_sequences bigint[] := ARRAY[]::bigint[];
BEGIN
"""
_ACCEPT_ENTRY_OLD = """\
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        VALUES (p_tenant_id, p_entry_ids[slot], p_transfer_id, account.id,
            CASE WHEN slot = 1 THEN 'debit' ELSE 'credit' END, p_amount_minor, p_currency, count_after,
            p_now_us);
        seen := seen || slot;
"""
_ACCEPT_ENTRY_NEW = """\
        entry_accounts := entry_accounts || account.id;
        entry_sequences := entry_sequences || count_after;
        seen := seen || slot;
"""
_ACCEPT_ENTRIES_OLD = """\
        RAISE EXCEPTION 'a payment holds on two accounts, found %', cardinality(seen) USING ERRCODE = 'PC009';
    END IF;
"""
_ACCEPT_ENTRIES_NEW = """\
        RAISE EXCEPTION 'a payment holds on two accounts, found %', cardinality(seen) USING ERRCODE = 'PC009';
    END IF;
    INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
        account_sequence, created_at_us)
    SELECT p_tenant_id, p_entry_ids[e.slot], p_transfer_id, e.account_id,
        CASE WHEN e.slot = 1 THEN 'debit' ELSE 'credit' END, p_amount_minor, p_currency, e.sequence, p_now_us
    FROM unnest(seen, entry_accounts, entry_sequences) WITH ORDINALITY AS e(slot, account_id, sequence, n)
    ORDER BY e.n;
"""

_SETTLE_DECLARE_OLD = """\
    updated integer := 0;
BEGIN
"""
_SETTLE_DECLARE_NEW = """\
    updated integer := 0;
    entry_ids text[] := ARRAY[]::text[];  -- a posted hold's entries, in the loop's order (0052)
    entry_accounts text[] := ARRAY[]::text[];
    entry_directions text[] := ARRAY[]::text[];
    entry_amounts bigint[] := ARRAY[]::bigint[];
    entry_currencies text[] := ARRAY[]::text[];
    entry_sequences bigint[] := ARRAY[]::bigint[];
BEGIN
"""
_SETTLE_ENTRY_OLD = """\
            INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
                account_sequence, created_at_us)
            VALUES (p_tenant_id, p_entry_ids[CASE WHEN held.direction = 'debit' THEN 1 ELSE 2 END],
                p_resolution_id, held.account_id, held.direction, held.amount_minor, out_currency, out_entries_count,
                p_now_us);
"""
_SETTLE_ENTRY_NEW = """\
            entry_ids := entry_ids || p_entry_ids[CASE WHEN held.direction = 'debit' THEN 1 ELSE 2 END];
            entry_accounts := entry_accounts || held.account_id;
            entry_directions := entry_directions || held.direction;
            entry_amounts := entry_amounts || held.amount_minor;
            entry_currencies := entry_currencies || out_currency;
            entry_sequences := entry_sequences || out_entries_count;
"""
_SETTLE_ENTRIES_OLD = """\
        RAISE EXCEPTION 'a payment''s hold moves two accounts, found %', updated USING ERRCODE = 'PC009';
    END IF;
"""
_SETTLE_ENTRIES_NEW = """\
        RAISE EXCEPTION 'a payment''s hold moves two accounts, found %', updated USING ERRCODE = 'PC009';
    END IF;
    IF p_post THEN
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        SELECT p_tenant_id, e.id, p_resolution_id, e.account_id, e.direction, e.amount_minor, e.currency, e.sequence,
            p_now_us
        FROM unnest(entry_ids, entry_accounts, entry_directions, entry_amounts, entry_currencies, entry_sequences)
            WITH ORDINALITY AS e(id, account_id, direction, amount_minor, currency, sequence, n)
        ORDER BY e.n;
    END IF;
"""

PASSAGES = (
    Passage(ACCEPT, _ACCEPT_CLEARING_OLD, _ACCEPT_CLEARING_NEW),
    Passage(ACCEPT, _ACCEPT_DECLARE_OLD, _ACCEPT_DECLARE_NEW),
    Passage(ACCEPT, _ACCEPT_ENTRY_OLD, _ACCEPT_ENTRY_NEW),
    Passage(ACCEPT, _ACCEPT_ENTRIES_OLD, _ACCEPT_ENTRIES_NEW),
    Passage(SETTLE, _SETTLE_DECLARE_OLD, _SETTLE_DECLARE_NEW),
    Passage(SETTLE, _SETTLE_ENTRY_OLD, _SETTLE_ENTRY_NEW),
    Passage(SETTLE, _SETTLE_ENTRIES_OLD, _SETTLE_ENTRIES_NEW),
)


def upgrade() -> None:
    migrate_passages(PASSAGES)


def downgrade() -> None:
    migrate_passages(PASSAGES, back=True)
