"""The disputes' lookups (SPEC §6.2, §12): the index `/metrics` reads
`paycore_dispute_evidence_due_in_seconds` through, and the processor's dispute id first in its
unique key.

    ix_disputes_evidence_due ON disputes (evidence_due_by_us, id)
        WHERE status IN ('needs_response', 'warning_needs_response')

Partial: it holds the disputes still waiting for the tenant's answer, never the decided ones,
so the nearest deadline is its first entry whatever the history. The gauge's one statement
(`disputes.repository.evidence_due_first`) names the statuses as literals, so that both
planners can prove the index's WHERE clause (a bound parameter would not).

The unique key on (tenant_id, processor_dispute_id) becomes (processor_dispute_id, tenant_id),
as 0008 did for the ledger accounts' code: on a `disputes` table not analyzed yet, every index
leading with tenant_id cost PostgreSQL the same, and it found a dispute by its processor id
through `ix_disputes_payment`, reading every dispute of the tenant (for every dispute webhook,
status query and answer), in the generic plan and the custom one (tests/integration/plans,
once a tenant's history holds disputes). What the key refuses is unchanged, and the ON CONFLICT
target naming its columns (`insert_or_ignore`) matches either order on both databases, so the
release before runs on this schema unchanged.

An index only: the release of 0035 and 0036 runs on this schema unchanged, and this release
runs on 0035 (its scrape then reads the table itself), so OLDEST_COMPATIBLE_REVISION stays 0035.
Locks: on PostgreSQL the key's new index and the partial one are built under a lock that holds
writes to `disputes` for the build (a small table beside payments); SQLite copies the table
(batch mode) under the write lock, then builds the partial index (a copy would lose its WHERE).
On a large PostgreSQL table build the partial index first, CONCURRENTLY, with the same
definition (the migration skips one that exists), then upgrade:

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_disputes_evidence_due ON disputes (evidence_due_by_us, id)
        WHERE status IN ('needs_response', 'warning_needs_response');

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-06 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

_AWAITING = "status IN ('needs_response', 'warning_needs_response')"
_OLD_KEY = ("uq_disputes_tenant_id_processor_dispute_id", ["tenant_id", "processor_dispute_id"])
_NEW_KEY = ("uq_disputes_processor_dispute_id_tenant_id", ["processor_dispute_id", "tenant_id"])


def _swap_key(drop: tuple[str, list[str]], create: tuple[str, list[str]]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        columns = ", ".join(create[1])
        op.execute(f"ALTER TABLE disputes DROP CONSTRAINT {drop[0]}, ADD CONSTRAINT {create[0]} UNIQUE ({columns})")
        return
    with op.batch_alter_table("disputes", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint(drop[0], type_="unique")
        batch_op.create_unique_constraint(create[0], create[1])


def upgrade() -> None:
    _swap_key(_OLD_KEY, _NEW_KEY)
    op.create_index(
        "ix_disputes_evidence_due",
        "disputes",
        ["evidence_due_by_us", "id"],
        sqlite_where=sa.text(_AWAITING),
        postgresql_where=sa.text(_AWAITING),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_disputes_evidence_due", table_name="disputes")
    _swap_key(_NEW_KEY, _OLD_KEY)
