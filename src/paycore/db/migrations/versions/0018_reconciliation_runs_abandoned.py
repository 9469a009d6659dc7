"""Reconciliation runs that never completed: `reconciliation_runs.status` admits
`abandoned`, beside `running` and `completed`.

A run whose lease on its day lapsed (its process killed, hung, or stopped by an error) is marked
`abandoned` by the next run of its day or by a worker, and its breaks are rolled back in the same
transaction (docs/reconciliation.md, "A run that does not complete"). Until now such a run stayed
`running` forever.

Additive: code of 0017 never writes `abandoned` and reads a run's status as a string (it shows an
abandoned run as it is, and counts only completed runs). This release writes it, so its
OLDEST_COMPATIBLE_REVISION is 0018.

Locks. PostgreSQL: the constraint is swapped in one statement under a short ACCESS EXCLUSIVE lock
(the table holds one row per run: checking its rows takes no time worth a NOT VALID step). SQLite: the table is copied (batch mode) under the write lock; it
has no triggers to create again.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_BEFORE = "status IN ('running', 'completed')"
_AFTER = "status IN ('running', 'completed', 'abandoned')"


def upgrade() -> None:
    _swap_status_check(_AFTER)


def downgrade() -> None:
    # Code of 0017 knows no `abandoned` run: such a run is one that never completed, as a
    # `running` run whose lease lapsed was to that code.
    op.execute("UPDATE reconciliation_runs SET status = 'running' WHERE status = 'abandoned'")
    _swap_status_check(_BEFORE)


def _swap_status_check(expression: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE reconciliation_runs DROP CONSTRAINT ck_reconciliation_runs_status,"
            f" ADD CONSTRAINT ck_reconciliation_runs_status CHECK ({expression})"
        )
        return
    with op.batch_alter_table("reconciliation_runs", recreate="always") as batch_op:
        batch_op.drop_constraint(op.f("ck_reconciliation_runs_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_reconciliation_runs_status"), sa.text(expression))
