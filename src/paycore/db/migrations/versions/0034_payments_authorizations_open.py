"""The open authorizations (SPEC §6.1, §12): the index `/metrics` reads
`paycore_authorizations_open` and `paycore_authorization_oldest_age_seconds` through.

    ix_payments_authorizations_open ON payments (created_at_us, id) WHERE status = 'requires_capture'

Partial: it holds the payments authorized and not yet captured, canceled or expired, never the
history, so it costs the automatic payments' writes nothing and stays as small as the open
authorizations. The gauges' one statement (`payments.repository.authorizations_open`) names the
status as a literal, so that both planners can prove the index's WHERE clause (a bound
parameter would not: SQLite and a PostgreSQL generic plan cannot use a partial index for it).

An index only: the release of 0033 runs on this schema unchanged, and this release runs on 0033
(its scrape then reads the table itself), so OLDEST_COMPATIBLE_REVISION stays 0033. Locks: on
PostgreSQL the index is built from the table's rows under a lock that holds writes for the
build; on a large table build it first, CONCURRENTLY, with the same definition (the migration
skips one that exists), then upgrade:

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_payments_authorizations_open
        ON payments (created_at_us, id) WHERE status = 'requires_capture';

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

_OPEN = "status = 'requires_capture'"


def upgrade() -> None:
    op.create_index(
        "ix_payments_authorizations_open",
        "payments",
        ["created_at_us", "id"],
        sqlite_where=sa.text(_OPEN),
        postgresql_where=sa.text(_OPEN),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_payments_authorizations_open", table_name="payments")
