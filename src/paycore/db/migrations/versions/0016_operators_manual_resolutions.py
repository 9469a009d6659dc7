"""People in paycore (ADR 0016): operators, their console sessions, the sign-in
throttle, manual resolutions, and each tenant's manual window.

- `operators`, `operator_sessions`, `operator_sign_in_failures`, `manual_resolutions`: new tables.
- `tenant_settings.manual_resolution_after_seconds`: nullable (NULL: the default, 72 h).
- `ix_reconciliation_breaks_object`: the open breaks that name an item (is it eligible for a
  manual resolution; its timeline). IF NOT EXISTS: on a large table an operator builds it first,
  CONCURRENTLY (docs/migrations.md).

New tables and a nullable column: code of 0015 runs against this schema unchanged. This
release's code reads the new column with every tenant's settings, so its
OLDEST_COMPATIBLE_REVISION is 0016.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_PROPOSED = "status = 'proposed'"
_CONFIRMED = "status = 'confirmed'"


def upgrade() -> None:
    op.add_column("tenant_settings", sa.Column("manual_resolution_after_seconds", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_reconciliation_breaks_object", "reconciliation_breaks", ["tenant_id", "object_id"], if_not_exists=True
    )
    op.create_table(
        "operators",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("token_prefix", sa.String(16), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("disabled_at_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_operators")),
        sa.UniqueConstraint("name", name=op.f("uq_operators_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_operators_token_hash")),
        sa.CheckConstraint("role IN ('viewer', 'operator', 'approver')", name=op.f("ck_operators_role")),
    )
    op.create_table(
        "operator_sessions",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("operator_id", sa.String(64), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_us", sa.BigInteger(), nullable=False),
        sa.Column("ended_at_us", sa.BigInteger(), nullable=True),
        sa.Column("end_cause", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_operator_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_operator_sessions_token_hash")),
    )
    op.create_index("ix_operator_sessions_operator", "operator_sessions", ["tenant_id", "operator_id"])
    op.create_table(
        "operator_sign_in_failures",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("window_start_us", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("blocked_until_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "address", name=op.f("pk_operator_sign_in_failures")),
    )
    op.create_table(
        "manual_resolutions",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("object_type", sa.String(16), nullable=False),
        sa.Column("object_id", sa.String(64), nullable=False),
        sa.Column("object_status", sa.String(20), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("proposed_by", sa.String(64), nullable=False),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("decision_note", sa.Text(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.Column("decided_at_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_manual_resolutions")),
        sa.CheckConstraint(
            "object_type IN ('payment', 'refund', 'payout')", name=op.f("ck_manual_resolutions_object_type")
        ),
        sa.CheckConstraint("outcome IN ('succeeded', 'failed')", name=op.f("ck_manual_resolutions_outcome")),
        sa.CheckConstraint(
            "status IN ('proposed', 'confirmed', 'rejected')", name=op.f("ck_manual_resolutions_status")
        ),
    )
    op.create_index("ix_manual_resolutions_object", "manual_resolutions", ["tenant_id", "object_id", "id"])
    op.create_index("ix_manual_resolutions_status", "manual_resolutions", ["tenant_id", "status", "id"])
    for name, where in (("uq_manual_resolutions_proposed", _PROPOSED), ("uq_manual_resolutions_confirmed", _CONFIRMED)):
        op.create_index(
            name,
            "manual_resolutions",
            ["tenant_id", "object_type", "object_id"],
            unique=True,
            sqlite_where=sa.text(where),
            postgresql_where=sa.text(where),
        )


def downgrade() -> None:
    op.drop_table("manual_resolutions")
    op.drop_table("operator_sign_in_failures")
    op.drop_table("operator_sessions")
    op.drop_table("operators")
    op.drop_index("ix_reconciliation_breaks_object", table_name="reconciliation_breaks")
    with op.batch_alter_table("tenant_settings") as batch:
        batch.drop_column("manual_resolution_after_seconds")
