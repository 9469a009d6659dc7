"""Authorize now, capture later (SPEC §6.1, ADR 0029): a payment's capture method, its
authorization's amounts and lifetime, the operation in flight on it, and two new statuses.

Columns (every one nullable or with a default: the PostgreSQL functions of 0027 and 0030 insert
and update a payment without naming them, and an automatic payment keeps its defaults):

- `capture_method` ('automatic' | 'manual', default 'automatic');
- `amount_capturable_minor`, `amount_captured_minor`: a manual payment's authorization as the
  processor said it (NULL for an automatic payment: the API derives its values);
- `authorization_expires_at_us`: when the processor said the authorization expires;
- `cancellation_reason` ('requested' | 'expired');
- `operation` ('capture' | 'cancel'): the call sent on an authorized payment while its outcome
  is not known (the API's `in_doubt_operation`), `operation_idempotency_key` the request's own
  key (answered by whoever settles the outcome: the request, a webhook, the resolver), and
  `capture_requested_minor` the amount a capture asked for (sent again, the same, on a retry).

The status CHECK admits `requires_capture` and `canceled`. PostgreSQL: the constraint is
swapped NOT VALID then validated in its own transaction (no scan under ACCESS EXCLUSIVE).
SQLite: the table is copied (batch mode) under the write lock, and its two partial indexes
are made again with their WHERE clauses.

The release before runs at this revision unchanged: it never reads the new columns, writes
none of them (their defaults are an automatic payment's) and meets no new status (no manual
payment exists until this release makes one). This release stores every payment with the new
columns, so OLDEST_COMPATIBLE_REVISION is 0033: migrate first, then roll the code out.
Downgrade refuses nothing: it drops the columns and narrows the CHECK (a database holding
manual payments cannot go back; roll the code back first, docs/migrations.md).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

_STATUS_BEFORE = "status IN ('processing', 'succeeded', 'failed', 'in_doubt')"
_STATUS_AFTER = "status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'in_doubt', 'canceled')"
_CAPTURE_METHOD = "capture_method IN ('automatic', 'manual')"
_PARTIAL_INDEXES = (
    ("ix_payments_queue", "status, next_attempt_at_us, id", "next_attempt_at_us IS NOT NULL"),
    ("ix_payments_faulted", "faulted_at_us, id", "faulted_at_us IS NOT NULL"),
)


def _columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("capture_method", sa.String(16), nullable=False, server_default="automatic"),
        sa.Column("amount_capturable_minor", sa.BigInteger(), nullable=True),
        sa.Column("amount_captured_minor", sa.BigInteger(), nullable=True),
        sa.Column("authorization_expires_at_us", sa.BigInteger(), nullable=True),
        sa.Column("cancellation_reason", sa.String(16), nullable=True),
        sa.Column("operation", sa.String(16), nullable=True),
        sa.Column("operation_idempotency_key", sa.String(255), nullable=True),
        sa.Column("capture_requested_minor", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for column in _columns():
            op.add_column("payments", column)
        op.create_check_constraint(op.f("ck_payments_capture_method"), "payments", sa.text(_CAPTURE_METHOD))
        _swap_on_postgres(_STATUS_AFTER)
        return
    with op.batch_alter_table("payments", schema=None, recreate="always") as batch_op:
        for column in _columns():
            batch_op.add_column(column)
        batch_op.drop_constraint(op.f("ck_payments_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_payments_status"), sa.text(_STATUS_AFTER))
        batch_op.create_check_constraint(op.f("ck_payments_capture_method"), sa.text(_CAPTURE_METHOD))
    _partial_indexes_again()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(op.f("ck_payments_capture_method"), "payments", type_="check")
        _swap_on_postgres(_STATUS_BEFORE)
        for column in reversed(_columns()):
            op.drop_column("payments", column.name)
        return
    with op.batch_alter_table("payments", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint(op.f("ck_payments_capture_method"), type_="check")
        batch_op.drop_constraint(op.f("ck_payments_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_payments_status"), sa.text(_STATUS_BEFORE))
        for column in reversed(_columns()):
            batch_op.drop_column(column.name)
    _partial_indexes_again()


def _partial_indexes_again() -> None:
    """SQLite: the copy's indexes as the model declares them (a copy may lose a WHERE clause)."""
    for name, columns, where in _PARTIAL_INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON payments ({columns}) WHERE {where}")


def _swap_on_postgres(expression: str) -> None:
    """As revision 0005 swaps payouts' CHECK: NOT VALID, then validated in its own transaction."""
    op.execute(
        "ALTER TABLE payments DROP CONSTRAINT ck_payments_status,"
        f" ADD CONSTRAINT ck_payments_status CHECK ({expression}) NOT VALID"
    )
    with op.get_context().autocommit_block():
        op.execute("SET statement_timeout = 0")
        try:
            op.execute("ALTER TABLE payments VALIDATE CONSTRAINT ck_payments_status")
        finally:
            op.execute("RESET statement_timeout")
