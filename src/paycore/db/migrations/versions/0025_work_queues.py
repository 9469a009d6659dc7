"""The workers' queues of payments and refunds: the work to do, found by status and due time.

`ix_payments_due` and `ix_refunds_due` were `(next_attempt_at_us)` over every row. The claim
(`lifecycle.store.claim_due`) reads `status IN (...) AND next_attempt_at_us <= now ... ORDER BY
next_attempt_at_us, id LIMIT n`. Without statistics a planner takes a range for a third of the
rows, and PostgreSQL found reading the whole table cheaper than fetching a third of it through
the index: every round of the worker read every payment or refund of every tenant
(tests/integration/plans/). This revision replaces each by

    ix_<table>_queue ON <table> (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL

as the payouts' `ix_payouts_next_attempt (status, next_attempt_at_us)` already is: searched by
status and due time, it is the cheapest plan whatever the estimate; partial, it holds the items a
worker has to take (a finished item's `next_attempt_at_us` is NULL), never the history, so it
stays as small as the work in flight.

Indexes only: code of 0024 runs on this schema unchanged, and this release's code runs on 0024
(its claims as before), so OLDEST_COMPATIBLE_REVISION stays 0023. Locks: on PostgreSQL the new
index is built from the table's rows under a lock that holds writes for the build; on a large
table build it first, CONCURRENTLY, with the same definition (the migration skips one that
exists), then upgrade:

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_payments_queue
        ON payments (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL;
    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_refunds_queue
        ON refunds (status, next_attempt_at_us, id) WHERE next_attempt_at_us IS NOT NULL;

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_TABLES = ("payments", "refunds")
_DUE = "next_attempt_at_us IS NOT NULL"


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


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.create_index(f"ix_{table}_due", table, ["next_attempt_at_us"])
        op.drop_index(f"ix_{table}_queue", table_name=table)
