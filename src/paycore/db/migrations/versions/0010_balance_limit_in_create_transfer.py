"""PostgreSQL only: `paycore_create_transfer` refuses a balance past 2^53 - 1, as Python does.

Two credits of (2^53 - 1) / 2 + 1 took a balance to 9007199254740992, which a
JavaScript client reads wrong. `paycore.ledger.postings._apply` now refuses a transfer that
would carry an account's posted, pending or available balance (as the API reports them), or
its posted balance plus incoming holds, past 2^53 - 1 in absolute value while moving it away
from zero (`balance_limit_exceeded`, see docs/ledger.md). The one-call function of revision
0009 must refuse exactly the same transfers, so this revision replaces its body (same
signature, `CREATE OR REPLACE`): after each account's UPDATE it computes the four figures
before and after, with the formulas of `paycore.ledger.balances.limited_figures`, and raises
SQLSTATE PC003, having written nothing; the caller then runs the reference path, which
decides and records the refusal.

Downgrade restores revision 0009's body. SQLite: nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 08:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# posted, pending, available, posted plus incoming holds of one account
# (paycore.ledger.balances.limited_figures), as numeric.
_FIGURES = """
CREATE FUNCTION paycore_balance_figures(
    p_normal text, p_debits_posted numeric, p_credits_posted numeric, p_debits_pending numeric,
    p_credits_pending numeric
) RETURNS numeric[] LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_normal = 'credit' THEN ARRAY[
        p_credits_posted - p_debits_posted,
        p_credits_pending - p_debits_pending,
        p_credits_posted - p_debits_posted - p_debits_pending,
        p_credits_posted - p_debits_posted + p_credits_pending]
    ELSE ARRAY[
        p_debits_posted - p_credits_posted,
        p_debits_pending - p_credits_pending,
        p_debits_posted - p_credits_posted - p_credits_pending,
        p_debits_posted - p_credits_posted + p_debits_pending]
    END
$$
"""

_REPLACE = """
CREATE OR REPLACE FUNCTION paycore_create_transfer(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_expires_at_us bigint,
    p_transfer_id text,
    p_kind text,
    p_batch_id text,
    p_reference_type text,
    p_reference_id text,
    p_metadata text,
    p_expires_at_us bigint,
    p_now_us bigint,
    -- one element per account, in account-id order
    p_account_ids text[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added bigint[],
    p_guard text[],
    -- one element per entry, in the request's order
    p_entry_ids text[],
    p_entry_account_ids text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    p_entry_currencies text[],
    p_entry_account_index bigint[],
    p_response_status integer,
    p_response_parts text[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    accounts_count constant integer := cardinality(p_account_ids);
    entry_total constant integer := cardinality(p_entry_ids);
    next_sequence bigint[] := array_fill(0::bigint, ARRAY[accounts_count]);
    sequences bigint[] := array_fill(0::bigint, ARRAY[entry_total]);
    body text := p_response_parts[1];
    debits_posted bigint;
    credits_posted bigint;
    debits_pending bigint;
    credits_pending bigint;
    count_after bigint;
    normal text;
    -- numeric: available = posted - holds could pass the bigint range on hand-edited totals
    figures_after numeric[];
    figures_before numeric[];
    account_index bigint;
BEGIN
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_now_us, p_key_expires_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;  -- the key exists: the caller replays it
    END IF;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, p_kind, NULL, NULL, p_batch_id, p_key, p_reference_type,
        p_reference_id, p_metadata, p_expires_at_us, p_now_us);

    FOR i IN 1 .. accounts_count LOOP
        -- Each total is checked against its bound before the addition (deltas are >= 0 here).
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + p_debits_posted[i],
            credits_posted_minor = credits_posted_minor + p_credits_posted[i],
            debits_pending_minor = debits_pending_minor + p_debits_pending[i],
            credits_pending_minor = credits_pending_minor + p_credits_pending[i],
            entries_count = ledger_accounts.entries_count + p_entries_added[i]
        WHERE tenant_id = p_tenant_id AND id = p_account_ids[i]
            AND debits_posted_minor <= total_max - p_debits_posted[i]
            AND credits_posted_minor <= total_max - p_credits_posted[i]
            AND debits_pending_minor <= total_max - p_debits_pending[i]
            AND credits_pending_minor <= total_max - p_credits_pending[i]
        RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count, normal_balance
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after, normal;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range, or does not exist', p_account_ids[i]
                USING ERRCODE = 'PC001', DETAIL = p_account_ids[i];
        END IF;
        -- The balance limit (paycore.ledger.balances.grows_past): posted, pending, available and
        -- posted plus incoming holds may not move away from zero past 2^53 - 1.
        figures_after := paycore_balance_figures(normal, debits_posted, credits_posted, debits_pending,
            credits_pending);
        figures_before := paycore_balance_figures(normal, debits_posted - p_debits_posted[i],
            credits_posted - p_credits_posted[i], debits_pending - p_debits_pending[i],
            credits_pending - p_credits_pending[i]);
        FOR k IN 1 .. 4 LOOP
            IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', p_account_ids[i]
                    USING ERRCODE = 'PC003', DETAIL = p_account_ids[i];
            END IF;
        END LOOP;
        -- available = posted - outgoing holds (paycore.ledger.balances.balance_of)
        IF (p_guard[i] = 'credit' AND credits_posted - debits_posted - debits_pending < 0)
            OR (p_guard[i] = 'debit' AND debits_posted - credits_posted - credits_pending < 0) THEN
            RAISE EXCEPTION 'account % has insufficient available funds', p_account_ids[i]
                USING ERRCODE = 'PC002', DETAIL = p_account_ids[i];
        END IF;
        next_sequence[i] := count_after - p_entries_added[i] + 1;
    END LOOP;

    FOR j IN 1 .. entry_total LOOP
        account_index := p_entry_account_index[j];
        sequences[j] := next_sequence[account_index];
        next_sequence[account_index] := next_sequence[account_index] + 1;
        body := body || sequences[j]::text || p_response_parts[j + 1];
    END LOOP;

    INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
        account_sequence, created_at_us)
    SELECT p_tenant_id, e.id, p_transfer_id, e.account_id, e.direction, e.amount_minor, e.currency,
        e.account_sequence, p_now_us
    FROM unnest(p_entry_ids, p_entry_account_ids, p_entry_directions, p_entry_amounts, p_entry_currencies,
        sequences) AS e(id, account_id, direction, amount_minor, currency, account_sequence);

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = body
    WHERE tenant_id = p_tenant_id AND key = p_key;
    RETURN sequences;
END $$
"""


def _revision_0009_body() -> str:
    """Revision 0009's function, to restore on downgrade (history: that file never changes)."""
    path = Path(__file__).with_name("0009_pg_create_transfer_function.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0009", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._CREATE).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FIGURES)
        op.execute(_REPLACE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_revision_0009_body())
        op.execute("DROP FUNCTION paycore_balance_figures(text, numeric, numeric, numeric, numeric)")
