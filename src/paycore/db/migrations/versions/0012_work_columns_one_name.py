"""One name for the work columns in every table the lifecycle drives.

Payments, refunds and payouts run on one lifecycle (paycore.lifecycle), whose work
columns have one name each (paycore.lifecycle.columns). Payments and refunds called the
round counter `resolve_attempts`, payouts `attempts`: rename the first two. A rename is
contract-only (no expand/backfill window): code older than this revision reads
`resolve_attempts`, so OLDEST_COMPATIBLE_REVISION moves to 0012 (docs/migrations.md).

Both databases (SQLite 3.25+ renames a column in place). Downgrade renames them back.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 17:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TABLES = ("payments", "refunds")


def upgrade() -> None:
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} RENAME COLUMN resolve_attempts TO attempts")


def downgrade() -> None:
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} RENAME COLUMN attempts TO resolve_attempts")
