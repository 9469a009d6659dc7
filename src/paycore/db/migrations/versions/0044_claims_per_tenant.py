"""The worker's queues searched tenant by tenant (docs/adr/0033-claims-per-tenant.md).

Every worker round now claims its due rows tenant by tenant (`paycore.lifecycle.per_tenant`):
`tenant_id = :t AND status IN (...) AND next_attempt_at_us <= :now ... ORDER BY
next_attempt_at_us, id LIMIT n FOR UPDATE SKIP LOCKED`, which Citus can route to the tenant's
shard. The queue indexes of 0025 (`(status, next_attempt_at_us, id)`) still serve the read that
finds the tenants with due work; for a tenant's own claim a planner without statistics took
`ix_payments_status (tenant_id, status, id)` instead: every unresolved payment of the tenant,
sorted (tests/integration/plans/). This revision adds, beside them,

    ix_<table>_tenant_queue ON <table> (tenant_id, status, next_attempt_at_us, id)
        WHERE next_attempt_at_us IS NOT NULL                 -- payments, refunds, payouts
    ix_payouts_tenant_due ON payouts (tenant_id, execute_on, id) WHERE status = 'scheduled'
    ix_processor_webhooks_tenant_due ON processor_webhooks (tenant_id, next_attempt_at_us, event_id)
        WHERE next_attempt_at_us IS NOT NULL

partial where the queue is (a finished item's `next_attempt_at_us` is NULL), so each holds the
work in flight, never the history.

Indexes only: the release before runs on this schema unchanged and this release's code runs on
0039 (its claims slower), so OLDEST_COMPATIBLE_REVISION stays. Locks: on PostgreSQL each index
is built under a lock that holds writes for the build; on a large table build them first,
CONCURRENTLY, with the same definitions (the migration skips one that exists), then upgrade.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None

_DUE = "next_attempt_at_us IS NOT NULL"
_QUEUES = ("payments", "refunds", "payouts")
_SCHEDULED = "status = 'scheduled'"  # the payouts whose day the queue round waits for


def upgrade() -> None:
    for table in _QUEUES:
        op.create_index(
            f"ix_{table}_tenant_queue",
            table,
            ["tenant_id", "status", "next_attempt_at_us", "id"],
            sqlite_where=sa.text(_DUE),
            postgresql_where=sa.text(_DUE),
            if_not_exists=True,
        )
    op.create_index(
        "ix_payouts_tenant_due",
        "payouts",
        ["tenant_id", "execute_on", "id"],
        sqlite_where=sa.text(_SCHEDULED),
        postgresql_where=sa.text(_SCHEDULED),
        if_not_exists=True,
    )
    op.create_index(
        "ix_processor_webhooks_tenant_due",
        "processor_webhooks",
        ["tenant_id", "next_attempt_at_us", "event_id"],
        sqlite_where=sa.text(_DUE),
        postgresql_where=sa.text(_DUE),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_processor_webhooks_tenant_due", table_name="processor_webhooks")
    op.drop_index("ix_payouts_tenant_due", table_name="payouts")
    for table in reversed(_QUEUES):
        op.drop_index(f"ix_{table}_tenant_queue", table_name=table)
