"""A bad item is isolated: the work columns `fault_code` and `faulted_at_us`, and `work_faults`.

A worker round that cannot move an item (its move or its ledger effect raises, e.g. a hold
resolved behind its flow's back) leaves it in its state, records the fault and goes on with the
rest of its batch (`paycore.lifecycle.faults`, docs/operations.md). This revision adds:

- to `payments`, `refunds` and `payouts` (the work columns, `lifecycle.columns`): `fault_code`
  (the error's code, NULL: none) and `faulted_at_us` (when), both nullable, and a partial index
  `ix_<table>_faulted (faulted_at_us, id) WHERE faulted_at_us IS NOT NULL`: the console's queue
  of items left on a fault, oldest first; it holds only those rows, so it costs other writes
  nothing;
- `work_faults`: one row per fault met (tenant, the audit note's id, the job), counted by
  `paycore_worker_item_faults_total{job}`.

Additive: code of 0020 (and 0021) selects the columns it declares and never sees the new ones (NULL in
the rows it inserts). This release writes them on every status change, so its
OLDEST_COMPATIBLE_REVISION is this one. Locks: PostgreSQL adds a nullable column without a
default by a catalog change, and builds each partial index from an empty set of rows (on a large
table, build them first CONCURRENTLY with the same definition: the migration skips one that
exists); SQLite adds the columns in place.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 02:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_TABLES = ("payments", "refunds", "payouts")
_FAULTED = "faulted_at_us IS NOT NULL"


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("fault_code", sa.String(length=64), nullable=True))
        op.add_column(table, sa.Column("faulted_at_us", sa.BigInteger(), nullable=True))
        op.create_index(
            f"ix_{table}_faulted",
            table,
            ["faulted_at_us", "id"],
            sqlite_where=sa.text(_FAULTED),
            postgresql_where=sa.text(_FAULTED),
            if_not_exists=True,
        )
    op.create_table(
        "work_faults",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("job", sa.String(length=48), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_work_faults")),
    )


def downgrade() -> None:
    op.drop_table("work_faults")
    for table in reversed(_TABLES):
        op.drop_index(f"ix_{table}_faulted", table_name=table)
        op.drop_column(table, "faulted_at_us")
        op.drop_column(table, "fault_code")
