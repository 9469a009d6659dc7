"""The console's indexes: what its pages need at 100,000 payments (bench/console_pages_bench.py,
docs/benchmarks.md "Operations console pages").

- `ix_payments_id` on `payments (id)`: the console's lists over every tenant are newest first by
  id (`lifecycle.store.search`: `ORDER BY id DESC LIMIT 51`, and `id < :starting_after` for the
  next page), and a payment's page finds it by id alone (`store.get_any`). The primary key leads
  with `tenant_id`, so without this index both read every payment: on SQLite the unfiltered
  list sorted all 100,000 rows (214-225 ms a page); with it, a backward index scan of 51 rows.

- `ix_events_id` on `events (id)`, `ix_events_object_id` on `events (object_id, id)` and
  `ix_events_actor` on `events (actor, id)`: the console's audit log (`/ops/audit`) over every
  tenant, newest first, unfiltered, by object or by actor. The audit log's own indexes lead with
  `tenant_id` (the API's list is tenant-scoped), so across tenants each of these pages read and
  sorted every event (about three per payment: 314,383 at 100,000 payments).

The other lists and pages measured under the target without a new index, and every index on a
money table costs each write (the cost of these: docs/benchmarks.md, "Operations console pages").

IF NOT EXISTS: on a large database an operator builds it first, CONCURRENTLY, then upgrades
(docs/migrations.md); the migration then finds it and skips it:

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_payments_id ON payments (id);
    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_events_id ON events (id);
    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_events_object_id ON events (object_id, id);
    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_events_actor ON events (actor, id);

An index only: code of 0016 runs against this schema unchanged, and this release's code runs on
0016 (more slowly), so OLDEST_COMPATIBLE_REVISION stays 0016.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 01:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_payments_id", "payments", ["id"], if_not_exists=True)
    op.create_index("ix_events_id", "events", ["id"], if_not_exists=True)
    op.create_index("ix_events_object_id", "events", ["object_id", "id"], if_not_exists=True)
    op.create_index("ix_events_actor", "events", ["actor", "id"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index("ix_events_actor", table_name="events")
    op.drop_index("ix_events_object_id", table_name="events")
    op.drop_index("ix_events_id", table_name="events")
    op.drop_index("ix_payments_id", table_name="payments")
