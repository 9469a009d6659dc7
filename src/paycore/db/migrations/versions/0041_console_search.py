"""The console's search (`/ops/search`, docs/operations-console.md "Search"): one index led by
each column a person may find a payment, refund, payout or dispute by, so that every lookup is
an index probe whatever the history, in one tenant or across every tenant.

    ix_payments_processor_reference ON payments (processor_reference, tenant_id)
    ix_payments_idempotency_key     ON payments (idempotency_key, tenant_id)
    ix_refunds_id                   ON refunds (id, tenant_id)
    ix_refunds_processor_reference  ON refunds (processor_reference, tenant_id)
    ix_refunds_idempotency_key      ON refunds (idempotency_key, tenant_id)
    ix_payouts_id                   ON payouts (id, tenant_id)
    ix_payouts_bank_reference       ON payouts (bank_reference, tenant_id)
    ix_payouts_idempotency_key      ON payouts (idempotency_key, tenant_id)
    ix_disputes_id                  ON disputes (id, tenant_id)

The searched column first, the tenant second, as 0037 made the disputes' key: one index answers
a lookup across tenants and one in a tenant alike. With the column alone, PostgreSQL on a table
not analyzed yet read a tenant's lookup as a bitmap AND of this index and one led by tenant_id
(every entry of the tenant: tests/integration/plans/test_console_search_plans.py).

What was there: `payments (id)` (0017), the primary keys and the idempotency keys' unique
constraints, all led by `tenant_id` (a probe for one tenant, a read of every tenant's rows for
the platform's staff), and the disputes' `(processor_dispute_id, tenant_id)` (0037). A tenant's
own lookups keep using those; these serve the lookups across tenants and the references, which
had no index at all. Every index on a money table costs each write (two more on `payments`):
the console's benchmark (`bench/console_pages_bench.py --write-cost`) measures it.

Metadata has no index: its values are matched among the newest objects only (a bounded read of
the id indexes' newest end; the limit is `SEARCH_METADATA_WINDOW_ROWS` in the console).

IF NOT EXISTS: on a large database an operator builds them first, CONCURRENTLY, then upgrades
(docs/migrations.md); the migration then finds them and skips them, e.g.

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_payments_processor_reference ON payments (processor_reference, tenant_id);

Indexes only: the release of 0040 runs on this schema unchanged, and this release runs on 0040
(its search then reads more), so OLDEST_COMPATIBLE_REVISION stays as it is.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-06 16:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None

INDEXES = (
    ("payments", "processor_reference"),
    ("payments", "idempotency_key"),
    ("refunds", "id"),
    ("refunds", "processor_reference"),
    ("refunds", "idempotency_key"),
    ("payouts", "id"),
    ("payouts", "bank_reference"),
    ("payouts", "idempotency_key"),
    ("disputes", "id"),
)  # each (table, column): an index on (column, tenant_id)


def upgrade() -> None:
    for table, column in INDEXES:
        op.create_index(f"ix_{table}_{column}", table, [column, "tenant_id"], if_not_exists=True)


def downgrade() -> None:
    for table, column in reversed(INDEXES):
        op.drop_index(f"ix_{table}_{column}", table_name=table)
