"""Refunds (one row per refund; the payment row's refunded_minor holds what they reserve),
and per-tenant settings (the refund approval threshold).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 14:51:37.922142
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_settings",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("refund_approval_threshold_minor", sa.BigInteger(), nullable=True),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenant_settings")),
    )
    op.create_table(
        "refunds",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("payment_id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("failure_code", sa.String(length=64), nullable=True),
        sa.Column("processor_request_id", sa.String(length=128), nullable=False),
        sa.Column("processor_reference", sa.String(length=128), nullable=True),
        sa.Column("transfer_id", sa.String(length=64), nullable=True),
        sa.Column("resolve_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("in_doubt_since_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "status IN ('requires_approval', 'pending', 'processing', 'succeeded', 'failed', 'in_doubt', 'canceled')",
            name=op.f("ck_refunds_status"),
        ),
        sa.CheckConstraint(
            "amount_minor > 0 AND amount_minor <= 9007199254740991", name=op.f("ck_refunds_amount_minor")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_refunds")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name=op.f("uq_refunds_tenant_id_idempotency_key")),
    )
    with op.batch_alter_table("refunds", schema=None) as batch_op:
        batch_op.create_index("ix_refunds_due", ["next_attempt_at_us"], unique=False)
        batch_op.create_index("ix_refunds_payment", ["tenant_id", "payment_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("refunds", schema=None) as batch_op:
        batch_op.drop_index("ix_refunds_payment")
        batch_op.drop_index("ix_refunds_due")

    op.drop_table("refunds")
    op.drop_table("tenant_settings")
