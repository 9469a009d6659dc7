"""The money path's plans by construction (ADR 0027): the workers' queues of payments and
refunds, and the batch function's reads of its accounts on PostgreSQL.

**The queues.** `ix_payments_due` and `ix_refunds_due` were `(next_attempt_at_us)` over every
row. The claim (`lifecycle.store.claim_due`) reads `status IN (...) AND next_attempt_at_us <= now
... ORDER BY next_attempt_at_us, id LIMIT n`. Without statistics a planner takes a range for a
third of the rows, and PostgreSQL found reading the whole table cheaper than fetching a third of
it through the index: every round of the worker read every payment (or refund) of every tenant
(tests/integration/plans/). This revision replaces each by

    ix_<table>_queue ON <table> (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL

as the payouts' `ix_payouts_next_attempt (status, next_attempt_at_us)` already is: searched by
status and due time, it is the cheapest plan whatever the estimate; partial, it holds the items a
worker has to take (a finished item's `next_attempt_at_us` is NULL), never the history, so it
stays as small as the work in flight.

**The batch** (PostgreSQL, `paycore_create_batch` of revision 0019). Its two reads of the batch's
accounts were joins of `unnest(ids)` with `ledger_accounts`; on a table without statistics the
generic plan searched the primary key by the tenant alone (a bitmap of every account of the
tenant) and hashed it against the ids. Here the lock-and-read is a LATERAL subquery per id (a
subquery that locks its rows is planned on its own: a primary-key lookup by the whole key, in
the ids' order, which stays the lock order), and the totals' update is one UPDATE per account,
by the whole key. The function is 0019's text with those two statements replaced (the
replacement is checked to apply exactly once); the downgrade puts 0019's back.

Indexes and a function body only: code of 0024 runs on this schema unchanged, and this
release's code runs on 0024 (its claims and batches as before), so OLDEST_COMPATIBLE_REVISION
stays 0023. Locks: on PostgreSQL the new indexes are built from the table's rows under a lock
that holds writes for the build; on a large table build them first, CONCURRENTLY, with the same
definition (the migration skips one that exists), then upgrade:

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_payments_queue
        ON payments (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL;
    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_refunds_queue
        ON refunds (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL;

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_TABLES = ("payments", "refunds")
_DUE = "next_attempt_at_us IS NOT NULL"

_LOCK_JOIN = """
        FROM unnest(p_account_ids) WITH ORDINALITY AS u(id, n)
        JOIN ledger_accounts a ON a.tenant_id = p_tenant_id AND a.id = u.id
        ORDER BY u.n
        FOR UPDATE OF a
    ) l;"""
_LOCK_LATERAL = """
        FROM unnest(p_account_ids) WITH ORDINALITY AS u(id, n)
        CROSS JOIN LATERAL (
            SELECT x.debits_posted_minor, x.credits_posted_minor, x.debits_pending_minor,
                x.credits_pending_minor, x.entries_count, x.normal_balance, x.currency
            FROM ledger_accounts x
            WHERE x.tenant_id = p_tenant_id AND x.id = u.id
            FOR UPDATE
        ) a
        ORDER BY u.n
    ) l;"""
_UPDATE_JOIN = """
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
    WHERE ledger_accounts.tenant_id = p_tenant_id AND ledger_accounts.id = s.id;"""
_UPDATE_EACH = """
    FOR s IN
        SELECT p_account_ids[m.a] AS id, sum(m.dp) AS dp, sum(m.cp) AS cp, sum(m.dq) AS dq, sum(m.cq) AS cq,
            sum(m.added) AS added
        FROM unnest(p_move_accounts, p_debits_posted, p_credits_posted, p_debits_pending, p_credits_pending,
            p_entries_added) AS m(a, dp, cp, dq, cq, added)
        GROUP BY m.a
        ORDER BY m.a
    LOOP
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + s.dp,
            credits_posted_minor = credits_posted_minor + s.cp,
            debits_pending_minor = debits_pending_minor + s.dq,
            credits_pending_minor = credits_pending_minor + s.cq,
            entries_count = entries_count + s.added
        WHERE tenant_id = p_tenant_id AND id = s.id;
    END LOOP;"""
_DECLARED = "\n    sequences bigint[];\nBEGIN"


def _batch_function(*, replaced: bool) -> str:
    """`paycore_create_batch` as revision 0019 created it, or with its account reads replaced
    (history: that file never changes, so neither does what this makes of it)."""
    path = Path(__file__).with_name("0019_pg_create_batch_function.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0019", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = str(module._CREATE).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    if replaced:
        for old, new in (
            (_LOCK_JOIN, _LOCK_LATERAL),
            (_UPDATE_JOIN, _UPDATE_EACH),
            (_DECLARED, "\n    sequences bigint[];\n    s record;\nBEGIN"),
        ):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
    return text


def upgrade() -> None:
    for table in _TABLES:
        op.create_index(
            f"ix_{table}_queue",
            table,
            ["status", "next_attempt_at_us", "id"],
            sqlite_where=sa.text(_DUE),
            postgresql_where=sa.text(_DUE),
            if_not_exists=True,
        )
        op.drop_index(f"ix_{table}_due", table_name=table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(replaced=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(replaced=False))
    for table in reversed(_TABLES):
        op.create_index(f"ix_{table}_due", table, ["next_attempt_at_us"])
        op.drop_index(f"ix_{table}_queue", table_name=table)
