"""Reconciliation, the rest of ADR 0014: one run of a day at a time, the lines a run has read,
the processor's fees booked once, and breaks a corrected report supersedes.

- `reconciliation_days`: the lease on a day (a compare-and-set on `claimed_by` and
  `claimed_until_us`, as the lifecycle's claims): two workers, or a worker and a CLI run, in
  any processes, never reconcile one day at once.
- `reconciliation_seen`: the lines a run has read, by (run, line type, tenant, request id):
  a second line with the same key is a `duplicate_line`, and `missing_at_processor` is one
  anti-join against it after the last chunk. Rows of superseded runs are deleted.
- `reconciliation_fees`: the processor's fee per object, booked once (its primary key).
- `reconciliation_breaks`: `superseded` admitted; `seen_run_id` (the last run that found the
  break again); the unique finding key covers open and resolved breaks only, so a finding a
  corrected report dropped and a later one brings back is stored again.

New tables and a small table's constraints: OLDEST_COMPATIBLE_REVISION stays 0012 (code of
0013 writes `open` breaks with a finding key the new index accepts, and never reads the new
tables). SQLite copies `reconciliation_breaks` (batch mode) under the write lock.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 03:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_NOT_SUPERSEDED = "status <> 'superseded'"


def upgrade() -> None:
    op.create_table(
        "reconciliation_days",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "day", name=op.f("pk_reconciliation_days")),
    )
    op.create_table(
        "reconciliation_seen",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("line_type", sa.String(16), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("line_number", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "line_type", "tenant_id", "request_id", name=op.f("pk_reconciliation_seen")),
    )
    op.create_table(
        "reconciliation_fees",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("object_type", sa.String(16), nullable=False),
        sa.Column("object_id", sa.String(64), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("fee_minor", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "object_type", "object_id", name=op.f("pk_reconciliation_fees")),
        sa.CheckConstraint("fee_minor > 0", name=op.f("ck_reconciliation_fees_fee_minor")),
    )
    _swap_breaks(statuses="'open', 'resolved', 'superseded'", upgrade=True)


def downgrade() -> None:
    op.execute("DELETE FROM reconciliation_breaks WHERE status = 'superseded'")
    _swap_breaks(statuses="'open', 'resolved'", upgrade=False)
    op.drop_table("reconciliation_fees")
    op.drop_table("reconciliation_seen")
    op.drop_table("reconciliation_days")


def _swap_breaks(*, statuses: str, upgrade: bool) -> None:
    unique = op.f("uq_reconciliation_breaks_tenant_id_day_finding_key")
    if not upgrade:
        op.drop_index("uq_reconciliation_breaks_finding", table_name="reconciliation_breaks")
    with op.batch_alter_table("reconciliation_breaks", recreate="auto") as batch_op:
        batch_op.drop_constraint(op.f("ck_reconciliation_breaks_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_reconciliation_breaks_status"), sa.text(f"status IN ({statuses})"))
        if upgrade:
            batch_op.drop_constraint(unique, type_="unique")
            batch_op.add_column(sa.Column("seen_run_id", sa.String(64), nullable=True))
        else:
            batch_op.drop_column("seen_run_id")
            batch_op.create_unique_constraint(unique, ["tenant_id", "day", "finding_key"])
    if upgrade:
        op.create_index(
            "uq_reconciliation_breaks_finding",
            "reconciliation_breaks",
            ["tenant_id", "day", "finding_key"],
            unique=True,
            sqlite_where=sa.text(_NOT_SUPERSEDED),
            postgresql_where=sa.text(_NOT_SUPERSEDED),
        )
