"""The console's sign-in throttle counts by operator name and address, with a bound per address.

- `operator_sign_in_counts`: new table. A row per (client address, operator name typed) and one
  per address (`operator_name` `*`) for every name's failures; the index on `window_start_us`
  finds the rows whose window has ended (deleted by the next failed sign-in).
- `operator_sign_in_failures` (one row per address: five failures from one address blocked every
  operator behind it) is left as it is: processes of the release before keep writing it during a
  rolling deploy. Nothing of this release reads it; a later revision drops it.

A new table: code of 0020 runs against this schema unchanged. This release's sign-in reads and
writes the new table, so its OLDEST_COMPATIBLE_REVISION is this revision. Failed sign-ins
counted by the old release are not carried over: a block lasts a minute, and the new counts
start empty (at worst an attacker's address gets one fresh window during the deploy).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operator_sign_in_counts",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("operator_name", sa.String(40), nullable=False),
        sa.Column("window_start_us", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("blocked_until_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "address", "operator_name", name=op.f("pk_operator_sign_in_counts")),
    )
    op.create_index("ix_operator_sign_in_counts_window", "operator_sign_in_counts", ["window_start_us"])


def downgrade() -> None:
    op.drop_index("ix_operator_sign_in_counts_window", table_name="operator_sign_in_counts")
    op.drop_table("operator_sign_in_counts")
