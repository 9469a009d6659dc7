"""The overview's charts (docs/operations-console.md, "The overview's charts"): the indexes
`reports.activity` reads the last 30 days through, so that the overview reads a bounded range
whatever the history holds.

    ix_payments_created ON payments (created_at_us, status, currency, amount_minor, amount_captured_minor,
        tenant_id)
    ix_refunds_created ON refunds (created_at_us)
    ix_payouts_sent ON payouts (sent_at_us)
    ix_events_levels ON events (created_at_us) WHERE <the events that move a level>

The first covers what the charts count and sum of a payment and its tenant, so the 30 days are
read from the index alone (on PostgreSQL, an index-only scan), a tenant's too. The last is partial: it holds only the events that move the in-doubt and open-break levels
(a payment, refund or payout going into `in_doubt` or out of it; a break opened, resolved or
superseded), a few in a thousand, so it costs the other events' writes nothing. Its WHERE
clause is `reports.activity.LEVEL_EVENTS` word for word (a planner uses a partial index only
for a query whose WHERE clause proves the index's).

Indexes only: the release of 0039 runs on this schema unchanged, so OLDEST_COMPATIBLE_REVISION
does not move. Locks: on PostgreSQL each index is built under a lock that holds the table's
writes for the build; on a large table build them first, CONCURRENTLY, with the same
definitions (the migration skips one that exists), then upgrade.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-06 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

_LEVEL_EVENTS = (
    "(kind = 'state_change' AND (from_state = 'in_doubt' OR to_state = 'in_doubt'))"
    " OR type IN ('reconciliation.break_opened', 'reconciliation.break_resolved', 'reconciliation.break_superseded')"
)


def upgrade() -> None:
    op.create_index(
        "ix_payments_created",
        "payments",
        ["created_at_us", "status", "currency", "amount_minor", "amount_captured_minor", "tenant_id"],
        if_not_exists=True,
    )
    op.create_index("ix_refunds_created", "refunds", ["created_at_us"], if_not_exists=True)
    op.create_index("ix_payouts_sent", "payouts", ["sent_at_us"], if_not_exists=True)
    op.create_index(
        "ix_events_levels",
        "events",
        ["created_at_us"],
        sqlite_where=sa.text(_LEVEL_EVENTS),
        postgresql_where=sa.text(_LEVEL_EVENTS),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_events_levels", table_name="events")
    op.drop_index("ix_payouts_sent", table_name="payouts")
    op.drop_index("ix_refunds_created", table_name="refunds")
    op.drop_index("ix_payments_created", table_name="payments")
