"""Retire the stored payout status `settled`, step 1 of 3 (expand): the status CHECK admits
both `settled` and `succeeded`.

Payments and refunds store `succeeded` for "the counterparty confirmed the money arrived";
payouts stored `settled` for the same fact. From this revision on the code stores `succeeded`
(the API, the events and the docs still say `settled`) and reads a `settled` row as
`succeeded`; 0006 rewrites the old rows, 0007 makes the database refuse the old spelling.
Runbook: docs/migrations.md.

Locks. PostgreSQL: the constraint is swapped NOT VALID (a short ACCESS EXCLUSIVE lock, no
scan), then validated in its own transaction (SHARE UPDATE EXCLUSIVE: reads and writes go on
during the scan). SQLite: the table is copied (batch mode) under the database's write lock;
payouts has no triggers to create again.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_STATUS_BEFORE = (
    "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'settled', 'failed', 'returned', 'canceled')"
)
_STATUS_EXPANDED = (
    "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'settled', 'succeeded', 'failed',"
    " 'returned', 'canceled')"
)


def upgrade() -> None:
    _swap_status_check(_STATUS_EXPANDED)


def downgrade() -> None:
    # 0006's downgrade rewrote `succeeded` back to `settled`; this sweeps the rows code of this
    # release wrote after it (expected to be few: roll the code back first, docs/migrations.md),
    # so the narrower constraint below finds no row it refuses.
    op.execute("UPDATE payouts SET status = 'settled' WHERE status = 'succeeded'")
    _swap_status_check(_STATUS_BEFORE)


def _swap_status_check(expression: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        _swap_on_postgres(expression)
        return
    with op.batch_alter_table("payouts", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint(op.f("ck_payouts_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_payouts_status"), sa.text(expression))


def _swap_on_postgres(expression: str) -> None:
    """Swap without holding ACCESS EXCLUSIVE during a table scan. `autocommit_block` commits
    the migrations before it: the swap is kept even if the validation is interrupted, and
    running this revision again swaps and validates again."""
    op.execute(
        "ALTER TABLE payouts DROP CONSTRAINT ck_payouts_status,"
        f" ADD CONSTRAINT ck_payouts_status CHECK ({expression}) NOT VALID"
    )
    with op.get_context().autocommit_block():
        op.execute("SET statement_timeout = 0")  # the scan of a large table may take minutes
        try:
            op.execute("ALTER TABLE payouts VALIDATE CONSTRAINT ck_payouts_status")
        finally:
            op.execute("RESET statement_timeout")
