"""Retire the stored payout status `settled`, step 3 of 3 (contract): the status CHECK admits
`succeeded` only. Downgrade: admit both again (0005's constraint).

It refuses to run (and changes nothing) while a `settled` row exists: a process older than
0005's code wrote it after 0006's backfill. Stop that process, rewrite the stragglers
(`UPDATE payouts SET status = 'succeeded' WHERE status = 'settled'`: a few rows) and run the
upgrade again (docs/migrations.md). Once this revision has shipped to every database,
`paycore.payouts.states.LEGACY_NAMES` and the tolerance built on it can be deleted.

Locks: as 0005 (PostgreSQL: NOT VALID swap, then validation in its own transaction; SQLite:
a table copy).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 10:00:02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_STATUS_EXPANDED = (
    "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'settled', 'succeeded', 'failed',"
    " 'returned', 'canceled')"
)
_STATUS_CONTRACTED = (
    "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'succeeded', 'failed', 'returned', 'canceled')"
)


def upgrade() -> None:
    left = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM payouts WHERE status = 'settled'")).scalar_one()
    if left:
        raise RuntimeError(
            f"{left} payouts still have status 'settled': a process older than revision 0005's code"
            " wrote them after the backfill. Stop it, run UPDATE payouts SET status = 'succeeded'"
            " WHERE status = 'settled', then upgrade again (docs/migrations.md)."
        )
    _swap_status_check(_STATUS_CONTRACTED)


def downgrade() -> None:
    _swap_status_check(_STATUS_EXPANDED)


def _swap_status_check(expression: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        _swap_on_postgres(expression)
        return
    with op.batch_alter_table("payouts", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint(op.f("ck_payouts_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_payouts_status"), sa.text(expression))


def _swap_on_postgres(expression: str) -> None:
    """As in 0005: a short exclusive lock without a scan, then the scan in its own transaction.
    A `settled` row written between the check above and the swap fails the validation; the
    swap stays (new `settled` writes are refused) and running this revision again finishes."""
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
