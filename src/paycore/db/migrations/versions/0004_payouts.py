"""Payouts and their adjustments (SPEC §11); API results in the audit log.

`payout_adjustments` is append-only like the ledger (triggers refuse UPDATE and DELETE, and
TRUNCATE on PostgreSQL). The events table's kind constraint admits `api_call` (the result of
an API request: a refused payout schedule request has no payout to hang a state change on),
`adjustment` (money moved for an object without a state change) and `note` (a decision
recorded without a change, e.g. a return refused because its window had closed).
On SQLite a constraint can only change by copying the table, which drops its triggers: they
are created again in the same migration.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 17:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_EVENT_KINDS_BEFORE = "kind IN ('state_change', 'processor_call', 'webhook')"
_EVENT_KINDS_AFTER = "kind IN ('state_change', 'processor_call', 'webhook', 'api_call', 'adjustment', 'note')"


def upgrade() -> None:
    op.create_table(
        "payouts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("rail", sa.String(length=8), nullable=False),
        sa.Column("source_account_id", sa.String(length=64), nullable=False),
        sa.Column("beneficiary_name", sa.String(length=140), nullable=False),
        sa.Column("iban", sa.String(length=34), nullable=True),
        sa.Column("bic", sa.String(length=11), nullable=True),
        sa.Column("routing_number", sa.String(length=9), nullable=True),
        sa.Column("account_number", sa.String(length=17), nullable=True),
        sa.Column("execute_on", sa.String(length=10), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("failure_code", sa.String(length=64), nullable=True),
        sa.Column("return_code", sa.String(length=16), nullable=True),
        sa.Column("transfer_id", sa.String(length=64), nullable=False),
        sa.Column("bank_reference", sa.String(length=128), nullable=True),
        sa.Column("batch_id", sa.String(length=128), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("in_doubt_since_us", sa.BigInteger(), nullable=True),
        sa.Column("sent_at_us", sa.BigInteger(), nullable=True),
        sa.Column("settled_at_us", sa.BigInteger(), nullable=True),
        sa.Column("returned_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'settled', 'failed', 'returned', 'canceled')",
            name=op.f("ck_payouts_status"),
        ),
        sa.CheckConstraint("rail IN ('ach', 'sepa')", name=op.f("ck_payouts_rail")),
        sa.CheckConstraint(
            "amount_minor > 0 AND amount_minor <= 9007199254740991", name=op.f("ck_payouts_amount_minor")
        ),
        sa.CheckConstraint(
            "(iban IS NULL) <> (account_number IS NULL)", name=op.f("ck_payouts_one_beneficiary_account")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_payouts")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name=op.f("uq_payouts_tenant_id_idempotency_key")),
    )
    with op.batch_alter_table("payouts", schema=None) as batch_op:
        batch_op.create_index("ix_payouts_due", ["status", "execute_on"], unique=False)
        batch_op.create_index("ix_payouts_next_attempt", ["status", "next_attempt_at_us"], unique=False)
        batch_op.create_index("ix_payouts_status", ["tenant_id", "status", "id"], unique=False)

    op.create_table(
        "payout_adjustments",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("payout_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=24), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=True),
        sa.Column("effective_on", sa.String(length=10), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("dedupe_key", sa.String(length=300), nullable=False),
        sa.Column("transfer_id", sa.String(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('fee', 'fee_reversal', 'return', 'return_fee', 'chargeback', 'chargeback_reversal', 'recovery', 'refund')",
            name=op.f("ck_payout_adjustments_kind"),
        ),
        sa.CheckConstraint("source IN ('bank', 'api')", name=op.f("ck_payout_adjustments_source")),
        sa.CheckConstraint(
            "amount_minor > 0 AND amount_minor <= 9007199254740991", name=op.f("ck_payout_adjustments_amount_minor")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_payout_adjustments")),
        sa.UniqueConstraint(
            "tenant_id", "payout_id", "dedupe_key", name=op.f("uq_payout_adjustments_tenant_id_payout_id_dedupe_key")
        ),
    )
    with op.batch_alter_table("payout_adjustments", schema=None) as batch_op:
        batch_op.create_index(
            "ix_payout_adjustments_effective",
            ["tenant_id", "effective_on", "payout_id", "kind", "amount_minor"],
            unique=False,
        )
        batch_op.create_index(
            "ix_payout_adjustments_payout",
            ["tenant_id", "payout_id", "effective_on", "kind", "amount_minor"],
            unique=False,
        )
    _append_only("payout_adjustments", create=True)
    _event_kinds(_EVENT_KINDS_BEFORE, _EVENT_KINDS_AFTER)


def downgrade() -> None:
    _event_kinds(_EVENT_KINDS_AFTER, _EVENT_KINDS_BEFORE)
    _append_only("payout_adjustments", create=False)
    op.drop_table("payout_adjustments")
    op.drop_table("payouts")


def _event_kinds(before: str, after: str) -> None:
    """Swap the events kind constraint. SQLite copies the table to do it, which drops the
    append-only triggers, so they are dropped first and created again after."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _append_only("events", create=False)
    with op.batch_alter_table("events", schema=None, recreate="auto") as batch_op:
        batch_op.drop_constraint(op.f("ck_events_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_events_kind"), sa.text(after))
    if sqlite:
        _append_only("events", create=True)
    del before  # named for the reader: the constraint this replaces


def _append_only(table: str, *, create: bool) -> None:
    """The triggers of migration 0002 (paycore_refuse_change on PostgreSQL), for `table`."""
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres and create:
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION paycore_refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION paycore_refuse_change()"
        )
    elif postgres:
        op.execute(f"DROP TRIGGER {table}_append_only ON {table}")
        op.execute(f"DROP TRIGGER {table}_no_truncate ON {table}")
    else:
        for operation in ("UPDATE", "DELETE"):
            if create:
                op.execute(
                    f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {operation} refused'); END"
                )
            else:
                op.execute(f"DROP TRIGGER {table}_no_{operation.lower()}")
