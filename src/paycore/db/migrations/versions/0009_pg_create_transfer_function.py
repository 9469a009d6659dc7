"""PostgreSQL only: `paycore_create_transfer`, a transfer and its idempotency key in one call.

ADR 0011. The function writes what `POST /v1/transfers` writes, in the same order (key claim,
transfer, each account's totals in account-id order under its row lock, entries numbered by
those UPDATEs, the recorded response), so that the hot account's row lock is held only
inside the server, not across client round trips. It decides nothing that can be decided
without a lock: the caller passes the validated transfer, each account's deltas and entry
count, and which accounts must keep `available >= 0` (by their normal balance). The rules it
writes a second time are those of `paycore.ledger.postings._apply`: the range check of each
total before the addition, the available formula of `paycore.ledger.balances`, and the
numbering of entries.

It commits only a success. It returns NULL, having written nothing, when the key exists; it
raises SQLSTATE PC001 (a total would leave its range, or the account is gone) or PC002 (an
account would go below zero available), and the statement rolls back. In each of those cases
the caller runs the reference path (Python, one transaction), which decides and records the
answer exactly as before this revision.

The response body is rendered by the caller with the entries' sequence numbers left out:
`p_response_parts` are the text between them, in entry order, and the function joins them
with the numbers it handed out, so the stored body is what the caller would have rendered.

SQLite: nothing (one writer; the round trips this saves do not exist there).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 00:20:00
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_SIGNATURE = (
    "paycore_create_transfer(text, text, text, bigint, text, text, text, text, text, text, bigint, bigint,"
    " text[], bigint[], bigint[], bigint[], bigint[], bigint[], text[],"
    " text[], text[], text[], bigint[], text[], bigint[], integer, text[])"
)

_CREATE = """
CREATE FUNCTION paycore_create_transfer(
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
            ledger_accounts.entries_count
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range, or does not exist', p_account_ids[i]
                USING ERRCODE = 'PC001', DETAIL = p_account_ids[i];
        END IF;
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


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
