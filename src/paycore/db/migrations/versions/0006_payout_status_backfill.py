"""Retire the stored payout status `settled`, step 2 of 3 (backfill): rewrite every `settled`
row as `succeeded`, in bounded batches. Downgrade: the reverse rewrite.

Run it only once no process older than 0005's code is left (they still write `settled`);
the upgrade fails, and can be run again, if a `settled` row remains when it is done.

Batches walk the primary key: read the next BATCH_ROWS_MAX keys in key order (an index range
scan), then rewrite those of them in the old status with an UPDATE per tenant naming their
ids (primary-key lookups; `status = old` is checked again, so a row a worker moved meanwhile
is left alone). Every batch costs the same, wherever it is in the table. On PostgreSQL each
statement commits on its own (an autocommit block): a batch locks at most BATCH_ROWS_MAX
rows for milliseconds, so a worker moving one of those payouts waits that long at most, and
an interrupted backfill keeps what it did (it is idempotent: run it again). On SQLite the
batches run in the migration's transaction, under the database's one write lock.
Nothing but `status` changes: not `updated_at_us` either, since the payout did not change,
only the word stored for its state.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:00:01
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BATCH_ROWS_MAX = 1_000
BATCHES_MAX = 10_000_000  # ten billion rows at the default size: past this the loop is a bug
# Tests set a smaller batch (an Alembic config attribute) to walk many batches over a few rows.
BATCH_ROWS_ATTRIBUTE = "payout_backfill_batch_rows_max"

# The table as this revision knows it (never the application's model, which moves on).
_payouts = sa.table("payouts", sa.column("tenant_id"), sa.column("id"), sa.column("status"))
_payout_key = sa.tuple_(_payouts.c.tenant_id, _payouts.c.id)
_log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    _rename("settled", "succeeded")


def downgrade() -> None:
    _rename("succeeded", "settled")


def _rename(old: str, new: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            renamed = _rename_in_batches(old, new)
    else:
        renamed = _rename_in_batches(old, new)
    _log.info("payouts: %d rows rewritten from status %r to %r", renamed, old, new)
    query = sa.select(sa.func.count()).select_from(_payouts).where(_payouts.c.status == old)
    left = op.get_bind().execute(query).scalar_one()
    if left:
        raise RuntimeError(
            f"{left} payouts still have status {old!r} after the rewrite: a process is still writing it"
            " (upgrading: code older than revision 0005's; downgrading: code that writes `succeeded`)."
            " Stop it, then run this migration again (docs/migrations.md)."
        )


def _rename_in_batches(old: str, new: str) -> int:
    """Rewrite `old` as `new` one batch of primary keys at a time; returns the rows rewritten."""
    connection = op.get_bind()
    config = op.get_context().config
    batch_rows = int(config.attributes.get(BATCH_ROWS_ATTRIBUTE, BATCH_ROWS_MAX)) if config else BATCH_ROWS_MAX
    assert 1 <= batch_rows <= BATCH_ROWS_MAX, batch_rows
    page = (
        sa.select(_payouts.c.tenant_id, _payouts.c.id, _payouts.c.status)
        .order_by(*_payout_key.clauses)
        .limit(batch_rows)
    )
    after: tuple[str, str] | None = None  # the last key of the previous batch
    renamed = 0
    for _ in range(BATCHES_MAX):
        query = page if after is None else page.where(_payout_key > sa.tuple_(*after))
        rows = connection.execute(query).all()
        if not rows:
            return renamed
        by_tenant: dict[str, list[str]] = {}
        for tenant_id, payout_id, status in rows:
            if status == old:
                by_tenant.setdefault(tenant_id, []).append(payout_id)
        for tenant_id, payout_ids in by_tenant.items():  # `tenant_id = ? AND id IN (...)`: the key's index
            renamed += connection.execute(_renaming(tenant_id, payout_ids, old, new)).rowcount
        after = (rows[-1][0], rows[-1][1])
    raise RuntimeError(f"the payouts table has more than {BATCHES_MAX} batches of {batch_rows} rows")


def _renaming(tenant_id: str, payout_ids: list[str], old: str, new: str) -> sa.Update:
    return (
        sa.update(_payouts)
        .where(_payouts.c.tenant_id == tenant_id, _payouts.c.id.in_(payout_ids), _payouts.c.status == old)
        .values(status=new)
    )
