"""The invariant checks' tables, and the index their "moved twice" checks read.

The money invariants run as a worker job (paycore.invariants, docs/invariants.md).
- `invariant_violations`: one row per (tenant, check, subject) found broken, written once.
- `invariant_cursors`: per check, the last subject key checked and when the check last ran
  (tenant id `*`: not a tenant's data).
- `ix_ledger_transfers_reference` on ledger_transfers (reference_id, tenant_id), partial
  (only payment and payout transfers): `payment_charged_twice` and `payout_sent_twice` look up
  the transfers of one payment or payout. Led by its own column, not tenant_id (see the note
  above `_unique_where_present` in paycore.ledger.models: the foreign keys' generic plans).

Both databases. Downgrade drops them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_REFERENCE_KINDS = "reference_type IN ('payment', 'payout')"


def upgrade() -> None:
    op.create_table(
        "invariant_violations",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("check_name", sa.String(48), nullable=False),
        sa.Column("subject_id", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "check_name", "subject_id", name=op.f("pk_invariant_violations")),
    )
    op.create_table(
        "invariant_cursors",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("check_name", sa.String(48), nullable=False),
        sa.Column("after_tenant_id", sa.String(64), nullable=False),
        sa.Column("after_id", sa.String(64), nullable=False),
        sa.Column("last_run_at_us", sa.BigInteger(), nullable=False),
        sa.Column("run_by", sa.String(64), nullable=True),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "check_name", name=op.f("pk_invariant_cursors")),
    )
    op.create_index(
        "ix_ledger_transfers_reference",
        "ledger_transfers",
        ["reference_id", "tenant_id"],
        sqlite_where=sa.text(_REFERENCE_KINDS),
        postgresql_where=sa.text(_REFERENCE_KINDS),
    )


def downgrade() -> None:
    op.drop_index("ix_ledger_transfers_reference", table_name="ledger_transfers")
    op.drop_table("invariant_cursors")
    op.drop_table("invariant_violations")
