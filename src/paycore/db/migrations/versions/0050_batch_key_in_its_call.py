"""PostgreSQL only: a batch's key claimed and answered inside its one call.

A keyed batch (`POST /v1/transfers/batch`) ran as three statements in the key's transaction:
the key's claim (`idempotency.repository.claim`), one call of `paycore_create_batch` (0019,
0025, 0047) and the answer's UPDATE, then the commit. The data plane's rule (ADR 0026) is that
the phase's server function is the one home of its key's claim, its rows and its stored answer,
as `paycore_create_transfer` (0009, 0010, 0020) is: one round trip, in autocommit.

This revision adds an overload of `paycore_create_batch` that takes the key first (after the
tenant): it queues on the key's advisory lock as every claim does (0020, `KEY_QUEUE_CLASS`) and
claims the key with no answer; a key that exists is answered `key_exists`, having written
nothing (the caller's reference path replays it or refuses a reused key). It then calls the
batch's own function, unchanged, which locks, checks and writes the rows: the one home of the
batch's rules. A refusal of that call (it wrote nothing) deletes the claim again and is
answered as that call answers it, so the whole call has written nothing; the caller's reference
path then refuses and records the refusal, as before. Otherwise the answer is stored: the body
the caller planned, cut where each entry's sequence number goes (`p_response_parts`), joined
with the numbers the write handed out (each move's first, then in entry order, as the batch's
function numbers them), read by `unnest ... WITH ORDINALITY` joined by position (a constant
`text[]` read by subscript is O(n) a subscript: 0047).

Every statement is filtered by the tenant, its first argument; `paycore db distribute`
delegates the overload by it as it does every function that takes the tenant first.

The batch's function of 0047 is not changed: the release before calls it (and this release's
reference path does, inside the key's transaction), so OLDEST_COMPATIBLE_REVISION stays.
Downgrade drops the overload, which leaves the previous definitions exactly as they were.
SQLite: nothing (`ledger.batch_keyed` writes a keyed batch with its fixed list there).

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-06 23:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history and does
# not follow the code.
_KEY_QUEUE_CLASS = 0x6B6579

_SIGNATURE = (
    "paycore_create_batch(text, text, text, bigint, text, bigint, text[], text[], text[], text[], text[],"
    " bigint[], text[], integer[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], text[],"
    " text[], integer[], text[], bigint[], integer, text[])"
)

_CREATE = f"""
CREATE FUNCTION paycore_create_batch(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_expires_at_us bigint,
    p_batch_id text,
    p_now_us bigint,
    -- the batch's function's arguments (0019), in its order
    p_transfer_ids text[],
    p_kinds text[],
    p_reference_types text[],
    p_reference_ids text[],
    p_metadata text[],
    p_expires_at_us bigint[],
    p_account_ids text[],
    p_move_transfers integer[],
    p_move_accounts integer[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added integer[],
    p_guard text[],
    p_entry_ids text[],
    p_entry_moves integer[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    -- the answer: its status, and its body cut at each entry's sequence number (entries + 1 parts)
    p_response_status integer,
    p_response_parts text[],
    OUT first_sequences bigint[],
    OUT refused_transfer integer,
    OUT refused_account text,
    OUT refusal text
) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_now_us, p_key_expires_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        refusal := 'key_exists';  -- nothing written: the caller replays the key
        RETURN;
    END IF;

    SELECT b.first_sequences, b.refused_transfer, b.refused_account, b.refusal
    INTO first_sequences, refused_transfer, refused_account, refusal
    FROM paycore_create_batch(p_tenant_id, p_batch_id, p_now_us, p_transfer_ids, p_kinds, p_reference_types,
        p_reference_ids, p_metadata, p_expires_at_us, p_account_ids, p_move_transfers, p_move_accounts,
        p_debits_posted, p_credits_posted, p_debits_pending, p_credits_pending, p_entries_added, p_guard,
        p_entry_ids, p_entry_moves, p_entry_directions, p_entry_amounts) AS b;
    IF refusal IS NOT NULL THEN
        -- the batch wrote nothing: neither does the call (the caller's reference path records it)
        DELETE FROM idempotency_keys WHERE tenant_id = p_tenant_id AND key = p_key;
        RETURN;
    END IF;

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = (
        SELECT string_agg(coalesce(s.sequence::text, '') || p.part, '' ORDER BY p.k)
        FROM unnest(p_response_parts) WITH ORDINALITY AS p(part, k)
        LEFT JOIN (
            SELECT m.n, first_sequences[m.move] + row_number() OVER (PARTITION BY m.move ORDER BY m.n) - 1
                AS sequence
            FROM unnest(p_entry_moves) WITH ORDINALITY AS m(move, n)
        ) s ON s.n = p.k - 1
    )
    WHERE tenant_id = p_tenant_id AND key = p_key;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
