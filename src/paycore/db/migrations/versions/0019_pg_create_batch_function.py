"""PostgreSQL only: `paycore_create_batch`, a whole batch of transfers in one call.

`ledger.create_batch` wrote a batch one transfer at a time: about seven statements each, so a
batch of 8,000 was some 56,000 round trips, with the batch's accounts locked throughout. This
function writes the batch in one statement, inside the caller's transaction (it commits
nothing: the batch's idempotency record commits with it, ADR 0004), set-based:

1. it locks the batch's accounts (`FOR UPDATE`, in the order given: the caller's sorted ids,
   the lock order of every transfer) and reads their totals, entry counts, normal balances
   and currencies;
2. one query computes, for every *move* (one transfer's change to one account, in the batch's
   order), the account's totals after it (running sums per account, as numeric) and finds the
   first move that a transfer applied alone, in this order, would have had refused. The
   checks are those of `paycore.ledger.postings._apply` and of `paycore_create_transfer`
   (revisions 0009, 0010), in its order (range, balance limit, available): the range of each
   total (`total_max`; the deltas are >= 0, so the first move past it is the first refused),
   the balance limit (`balance_max`, figures of `paycore_balance_figures`), and available >= 0
   on the guarded accounts. A refusal returns the transfer's index (0-based), the account, and
   what was refused (`overflow`, `limit:K` with K the figure's position, `insufficient`),
   *having written nothing*, so the caller raises the reference path's error for it;
3. otherwise each account's totals are updated once, by the batch's sums, and the transfers
   and entries are inserted (`unnest`), the entries numbered from each account's entry count
   in the batch's order, as the reference path numbers them. It returns each move's first
   sequence number (its entries follow it, in entry order).

An account not found (the caller's cache of account facts may name one from a transaction that
rolled back) is refused as `not_found`, for the first move on it. `paycore.ledger.limits` names this copy of its
rule; tests/integration/ledger/test_batch.py holds it to the rule.

SQLite: nothing (`ledger.batch` writes a batch with multi-row statements there).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 09:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_SIGNATURE = (
    "paycore_create_batch(text, text, bigint, text[], text[], text[], text[], text[], bigint[], text[],"
    " integer[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], text[],"
    " text[], integer[], text[], bigint[])"
)

_CREATE = """
CREATE FUNCTION paycore_create_batch(
    p_tenant_id text,
    p_batch_id text,
    p_now_us bigint,
    -- one element per transfer, in the batch's order
    p_transfer_ids text[],
    p_kinds text[],
    p_reference_types text[],
    p_reference_ids text[],
    p_metadata text[],
    p_expires_at_us bigint[],
    -- one element per account, in lock order (sorted ids)
    p_account_ids text[],
    -- one element per move (a transfer's change to one account): the batch's order, and in
    -- each transfer its accounts' order; transfers and accounts as 1-based positions
    p_move_transfers integer[],
    p_move_accounts integer[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added integer[],
    p_guard text[],
    -- one element per entry, in the batch's order; its move as a 1-based position
    p_entry_ids text[],
    p_entry_moves integer[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    OUT first_sequences bigint[],
    OUT refused_transfer integer,
    OUT refused_account text,
    OUT refusal text
) LANGUAGE plpgsql AS $$
DECLARE
    total_max constant numeric := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    debits_posted bigint[];
    credits_posted bigint[];
    debits_pending bigint[];
    credits_pending bigint[];
    counts bigint[];
    normals text[];
    currencies text[];
    locked integer;
    sequences bigint[];
BEGIN
    SELECT array_agg(l.debits_posted_minor ORDER BY l.n), array_agg(l.credits_posted_minor ORDER BY l.n),
        array_agg(l.debits_pending_minor ORDER BY l.n), array_agg(l.credits_pending_minor ORDER BY l.n),
        array_agg(l.entries_count ORDER BY l.n), array_agg(l.normal_balance ORDER BY l.n),
        array_agg(l.currency ORDER BY l.n), count(*)
    INTO debits_posted, credits_posted, debits_pending, credits_pending, counts, normals, currencies, locked
    FROM (
        SELECT u.n, a.debits_posted_minor, a.credits_posted_minor, a.debits_pending_minor,
            a.credits_pending_minor, a.entries_count, a.normal_balance, a.currency
        FROM unnest(p_account_ids) WITH ORDINALITY AS u(id, n)
        JOIN ledger_accounts a ON a.tenant_id = p_tenant_id AND a.id = u.id
        ORDER BY u.n
        FOR UPDATE OF a
    ) l;
    IF locked <> cardinality(p_account_ids) THEN
        -- an id from the process's cache of account facts, of a transaction that rolled back
        SELECT m.t - 1, p_account_ids[m.a], 'not_found' INTO refused_transfer, refused_account, refusal
        FROM unnest(p_move_transfers, p_move_accounts) WITH ORDINALITY AS m(t, a, n)
        WHERE NOT EXISTS (SELECT FROM ledger_accounts x WHERE x.tenant_id = p_tenant_id AND x.id = p_account_ids[m.a])
        ORDER BY m.n
        LIMIT 1;
        RETURN;
    END IF;

    WITH moves AS (
        SELECT m.n, m.t, m.a, m.added, m.guard,
            m.dp::numeric AS ddp, m.cp::numeric AS dcp, m.dq::numeric AS ddq, m.cq::numeric AS dcq,
            debits_posted[m.a] + sum(m.dp) OVER w AS dp, credits_posted[m.a] + sum(m.cp) OVER w AS cp,
            debits_pending[m.a] + sum(m.dq) OVER w AS dq, credits_pending[m.a] + sum(m.cq) OVER w AS cq,
            counts[m.a] + sum(m.added) OVER w - m.added + 1 AS first_sequence
        FROM unnest(p_move_transfers, p_move_accounts, p_debits_posted, p_credits_posted, p_debits_pending,
            p_credits_pending, p_entries_added, p_guard) WITH ORDINALITY AS m(t, a, dp, cp, dq, cq, added, guard, n)
        WINDOW w AS (PARTITION BY m.a ORDER BY m.n)
    ), checked AS (
        SELECT moves.*,
            (dp > total_max OR cp > total_max OR dq > total_max OR cq > total_max) AS overflow,
            -- No figure's absolute value exceeds greatest(dp, cp) + greatest(dq, cq): below
            -- balance_max the figures need not be computed (most moves).
            CASE WHEN greatest(dp, cp) + greatest(dq, cq) > balance_max THEN
                (SELECT min(f.k) FROM unnest(paycore_balance_figures(normals[a], dp, cp, dq, cq),
                        paycore_balance_figures(normals[a], dp - ddp, cp - dcp, dq - ddq, cq - dcq))
                        WITH ORDINALITY AS f(after, before, k)
                    WHERE abs(f.after) > balance_max AND abs(f.after) > abs(f.before))
            END AS past_limit,
            -- available = posted - outgoing holds (paycore.ledger.balances.balance_of)
            ((guard = 'credit' AND cp - dp - dq < 0) OR (guard = 'debit' AND dp - cp - cq < 0)) AS overdrawn
        FROM moves
    ), first_refused AS (
        SELECT t, a, CASE WHEN overflow THEN 'overflow' WHEN past_limit IS NOT NULL THEN 'limit:' || past_limit
            ELSE 'insufficient' END AS what
        FROM checked
        WHERE overflow OR past_limit IS NOT NULL OR overdrawn
        ORDER BY n
        LIMIT 1
    )
    SELECT (SELECT array_agg(first_sequence ORDER BY n) FROM moves), r.t - 1, p_account_ids[r.a], r.what
    INTO first_sequences, refused_transfer, refused_account, refusal
    FROM (SELECT 1) one LEFT JOIN first_refused r ON true;
    IF refusal IS NOT NULL THEN
        RETURN;  -- nothing written: the caller raises the refusal
    END IF;

    UPDATE ledger_accounts SET
        debits_posted_minor = debits_posted_minor + s.dp,
        credits_posted_minor = credits_posted_minor + s.cp,
        debits_pending_minor = debits_pending_minor + s.dq,
        credits_pending_minor = credits_pending_minor + s.cq,
        entries_count = ledger_accounts.entries_count + s.added
    FROM (
        SELECT p_account_ids[m.a] AS id, sum(m.dp) AS dp, sum(m.cp) AS cp, sum(m.dq) AS dq, sum(m.cq) AS cq,
            sum(m.added) AS added
        FROM unnest(p_move_accounts, p_debits_posted, p_credits_posted, p_debits_pending, p_credits_pending,
            p_entries_added) AS m(a, dp, cp, dq, cq, added)
        GROUP BY m.a
    ) s
    WHERE ledger_accounts.tenant_id = p_tenant_id AND ledger_accounts.id = s.id;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, metadata, expires_at_us, created_at_us)
    SELECT p_tenant_id, t.id, t.kind, NULL, NULL, p_batch_id, NULL, t.reference_type, t.reference_id,
        t.metadata, t.expires_at_us, p_now_us
    FROM unnest(p_transfer_ids, p_kinds, p_reference_types, p_reference_ids, p_metadata, p_expires_at_us)
        AS t(id, kind, reference_type, reference_id, metadata, expires_at_us);

    SELECT array_agg(e.sequence ORDER BY e.n) INTO sequences
    FROM (
        SELECT m.n, first_sequences[m.move] + row_number() OVER (PARTITION BY m.move ORDER BY m.n) - 1 AS sequence
        FROM unnest(p_entry_moves) WITH ORDINALITY AS m(move, n)
    ) e;

    INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
        account_sequence, created_at_us)
    SELECT p_tenant_id, e.id, p_transfer_ids[p_move_transfers[e.move]], p_account_ids[p_move_accounts[e.move]],
        e.direction, e.amount_minor, currencies[p_move_accounts[e.move]], e.sequence, p_now_us
    FROM unnest(p_entry_ids, p_entry_moves, p_entry_directions, p_entry_amounts, sequences)
        AS e(id, move, direction, amount_minor, sequence);
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
