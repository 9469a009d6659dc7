"""Reconciliation's tables: runs of a day's settlement report and the breaks they find.

ADR 0014: `reconciliation_runs` (tenant id `*`: a report covers every merchant) and
`reconciliation_breaks` (one row per finding, unique per tenant, day and finding key). New
tables only: code older than this revision never reads them, so OLDEST_COMPATIBLE_REVISION
stays 0012.

Both databases. Downgrade drops them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 01:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reconciliation_runs",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("report_sha256", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lines_read", sa.BigInteger(), nullable=False),
        sa.Column("matched", sa.BigInteger(), nullable=False),
        sa.Column("breaks_found", sa.BigInteger(), nullable=False),
        sa.Column("resolved", sa.BigInteger(), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("finished_at_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_reconciliation_runs")),
        sa.CheckConstraint("status IN ('running', 'completed')", name=op.f("ck_reconciliation_runs_status")),
    )
    op.create_index("ix_reconciliation_runs_day", "reconciliation_runs", ["day", "id"])
    op.create_table(
        "reconciliation_breaks",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("finding_key", sa.String(200), nullable=False),
        sa.Column("object_type", sa.String(16), nullable=True),
        sa.Column("object_id", sa.String(64), nullable=True),
        sa.Column("object_status", sa.String(20), nullable=True),
        sa.Column("line_number", sa.BigInteger(), nullable=True),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("resolution", sa.String(32), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("resolved_by", sa.String(64), nullable=True),
        sa.Column("resolved_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_reconciliation_breaks")),
        sa.UniqueConstraint(
            "tenant_id", "day", "finding_key", name=op.f("uq_reconciliation_breaks_tenant_id_day_finding_key")
        ),
        sa.CheckConstraint("status IN ('open', 'resolved')", name=op.f("ck_reconciliation_breaks_status")),
    )
    op.create_index("ix_reconciliation_breaks_status", "reconciliation_breaks", ["tenant_id", "status", "id"])


def downgrade() -> None:
    op.drop_index("ix_reconciliation_breaks_status", table_name="reconciliation_breaks")
    op.drop_table("reconciliation_breaks")
    op.drop_index("ix_reconciliation_runs_day", table_name="reconciliation_runs")
    op.drop_table("reconciliation_runs")
