"""Payments, the audit log (events, append-only), and webhooks received from the processor.

The events table is append-only like the ledger: triggers refuse UPDATE and DELETE on both
databases (and TRUNCATE on PostgreSQL), reusing 0001's paycore_refuse_change() there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 13:50:43.703037
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("object_type", sa.String(length=32), nullable=False),
        sa.Column("object_id", sa.String(length=64), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=True),
        sa.Column("cause", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("kind IN ('state_change', 'processor_call', 'webhook')", name=op.f("ck_events_kind")),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_kind", ["tenant_id", "kind", "id"], unique=False)
        batch_op.create_index("ix_events_object", ["tenant_id", "object_id", "id"], unique=False)

    op.create_table(
        "payments",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("source_type", sa.String(length=16), nullable=False),
        sa.Column("source_token", sa.String(length=255), nullable=False),
        sa.Column("destination_account_id", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("failure_code", sa.String(length=64), nullable=True),
        sa.Column("processor_request_id", sa.String(length=128), nullable=False),
        sa.Column("processor_reference", sa.String(length=128), nullable=True),
        sa.Column("transfer_id", sa.String(length=64), nullable=False),
        sa.Column("refunded_minor", sa.BigInteger(), nullable=False),
        sa.Column("resolve_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("in_doubt_since_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "status IN ('processing', 'succeeded', 'failed', 'in_doubt')", name=op.f("ck_payments_status")
        ),
        sa.CheckConstraint(
            "amount_minor > 0 AND amount_minor <= 9007199254740991", name=op.f("ck_payments_amount_minor")
        ),
        sa.CheckConstraint(
            "refunded_minor >= 0 AND refunded_minor <= amount_minor", name=op.f("ck_payments_refunded_minor")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_payments")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name=op.f("uq_payments_tenant_id_idempotency_key")),
    )
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.create_index("ix_payments_due", ["next_attempt_at_us"], unique=False)
        batch_op.create_index("ix_payments_status", ["tenant_id", "status", "id"], unique=False)

    op.create_table(
        "processor_webhooks",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("object_type", sa.String(length=32), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("processed_at_us", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status IN ('applied', 'stale', 'unmatched', 'abandoned')", name=op.f("ck_processor_webhooks_status")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_processor_webhooks")),
    )
    with op.batch_alter_table("processor_webhooks", schema=None) as batch_op:
        batch_op.create_index("ix_processor_webhooks_due", ["next_attempt_at_us"], unique=False)

    _create_append_only_triggers()


def downgrade() -> None:
    _drop_append_only_triggers()
    with op.batch_alter_table("processor_webhooks", schema=None) as batch_op:
        batch_op.drop_index("ix_processor_webhooks_due")

    op.drop_table("processor_webhooks")
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.drop_index("ix_payments_status")
        batch_op.drop_index("ix_payments_due")

    op.drop_table("payments")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_object")
        batch_op.drop_index("ix_events_kind")

    op.drop_table("events")


def _create_append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
            "FOR EACH ROW EXECUTE FUNCTION paycore_refuse_change()"
        )
        op.execute(
            "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION paycore_refuse_change()"
        )
        return
    for operation in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER events_no_{operation.lower()} BEFORE {operation} ON events "
            f"BEGIN SELECT RAISE(ABORT, 'events is append-only: {operation} refused'); END"
        )


def _drop_append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER events_append_only ON events")
        op.execute("DROP TRIGGER events_no_truncate ON events")
        return
    for operation in ("update", "delete"):
        op.execute(f"DROP TRIGGER events_no_{operation}")
