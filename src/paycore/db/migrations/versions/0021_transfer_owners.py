"""Who may move a transfer (expand and backfill): `ledger_transfers.owner_id` and
`ledger_accounts.system`.

A transfer that a flow writes (a payment's hold, a refund's, a payout's hold, settlement and
adjustments, a credit, a reconciliation run's processor fees) belongs to that flow: its owner
is the flow object's id, and only that object's own operations post, void or reverse it. A
tenant's own transfers (the ledger API) have no owner. paycore's system accounts (the chart of
accounts: `processor.clearing.CUR` and the rest) carry `system`: only owned transfers move them.
The code that writes owners and refuses the rest ships with this revision; the database's own
refusals (triggers) come with 0024, once no older process writes unowned flow
transfers.

Backfill, set-based, each statement idempotent (`owner_id IS NULL`), so 0024 runs the same
statements again for the rows older processes wrote during a rolling deploy (`backfill`):

1. accounts whose code is a system code for their currency (`processor.clearing.USD` in USD);
2. the transfers a flow row names (`payments.transfer_id` and the same column of refunds,
   payouts, payout adjustments and credits): owned by that row;
3. the other transfers a flow wrote: no idempotency key, no batch, not a resolution or a
   reversal, with a reference (a payout's settlement): owned by the object referenced. Every
   transfer of the ledger API carries its request's key or its batch's id;
4. keyed transfers whose key is no tenant's idempotency key (a processor fee: `settlement-fee:`
   keys): owned by the reconciliation run the key names, else by the payment referenced;
5. posts, voids and expiries inherit their hold's owner, then reversals their original's
   (repeated for reversals of reversals).

The ledger's tables are append-only: the append-only triggers are set aside for the backfill's
UPDATEs, inside this revision's transaction (PostgreSQL: `ALTER TABLE ... DISABLE TRIGGER`,
which holds writes to ledger_transfers for the backfill's length; SQLite: the trigger is
dropped and created again), and only `owner_id` is written.

Code of 0020 runs at this revision (new columns only, and `system` defaults to false), but
what it writes has no owner until 0024's backfill: this release writes both columns, so its
OLDEST_COMPATIBLE_REVISION is at least 0021.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 02:00:00
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# The chart of accounts' prefixes (paycore.ledger.chart), written out: a migration is history.
SYSTEM_PREFIXES: Final = (
    "processor.clearing",
    "processor.fees",
    "credits.balance",
    "credits.issued",
    "payouts.in_transit",
    "bank.cash",
    "payouts.fees",
    "payouts.losses",
)
# (flow table, the column naming the owner): each row's `transfer_id` is owned by it.
_FLOW_TRANSFERS: Final = (
    ("payments", "id"),
    ("refunds", "id"),
    ("payouts", "id"),
    ("payout_adjustments", "payout_id"),
    ("credits", "id"),
)
_FEE_RUN_PREFIX: Final = "settlement-fees:"  # settlement-fees:<run id>:<chunk>:<currency>
_REVERSAL_DEPTH_MAX: Final = 64  # reversals of reversals followed this deep


def upgrade() -> None:
    op.add_column("ledger_accounts", sa.Column("system", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("ledger_transfers", sa.Column("owner_id", sa.String(64), nullable=True))
    backfill()


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place, keeping the table's triggers.
    op.drop_column("ledger_transfers", "owner_id")
    op.drop_column("ledger_accounts", "system")


def backfill() -> None:
    """Set `system` and `owner_id` where they are missing (see the module). Idempotent."""
    bind = op.get_bind()
    systems = " OR ".join(f"code = '{prefix}.' || currency" for prefix in SYSTEM_PREFIXES)
    op.execute(f"UPDATE ledger_accounts SET system = TRUE WHERE system = FALSE AND ({systems})")
    with _transfers_writable(bind.dialect.name):
        for table, owner in _FLOW_TRANSFERS:
            op.execute(
                f"UPDATE ledger_transfers AS t SET owner_id = f.{owner} FROM {table} AS f"
                " WHERE f.tenant_id = t.tenant_id AND f.transfer_id = t.id AND t.owner_id IS NULL"
            )
        op.execute(
            "UPDATE ledger_transfers SET owner_id = reference_id WHERE owner_id IS NULL AND reference_id IS NOT NULL"
            " AND idempotency_key IS NULL AND batch_id IS NULL AND pending_id IS NULL AND reverses_id IS NULL"
        )
        _fee_owners(bind)
        _inherited(pending=True)
        for _ in range(_REVERSAL_DEPTH_MAX):
            if _inherited(pending=False) == 0:
                break


def _fee_owners(bind: sa.Connection) -> None:
    """Keyed transfers that no tenant request made: the processor's fees. A handful of rows
    (one per reconciliation chunk, tenant and currency), so read and written one by one."""
    rows = bind.execute(
        sa.text(
            "SELECT t.tenant_id, t.id, t.idempotency_key, t.reference_id FROM ledger_transfers t"
            " WHERE t.owner_id IS NULL AND t.idempotency_key IS NOT NULL AND t.batch_id IS NULL"
            " AND t.pending_id IS NULL AND t.reverses_id IS NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k"
            " WHERE k.tenant_id = t.tenant_id AND k.key = t.idempotency_key)"
        )
    ).all()
    for tenant_id, transfer_id, key, reference_id in rows:
        owner = reference_id
        if key.startswith(_FEE_RUN_PREFIX):
            owner = key[len(_FEE_RUN_PREFIX) :].split(":", 1)[0] or reference_id
        if owner is None:
            continue
        bind.execute(
            sa.text("UPDATE ledger_transfers SET owner_id = :owner WHERE tenant_id = :t AND id = :id"),
            {"owner": owner[:64], "t": tenant_id, "id": transfer_id},
        )


def _inherited(*, pending: bool) -> int:
    """Resolutions take their hold's owner (pending), reversals their original's; the rows set."""
    column = "pending_id" if pending else "reverses_id"
    result = op.get_bind().execute(
        sa.text(
            "UPDATE ledger_transfers AS t SET owner_id = o.owner_id FROM ledger_transfers AS o"
            f" WHERE o.tenant_id = t.tenant_id AND o.id = t.{column} AND t.owner_id IS NULL"
            " AND o.owner_id IS NOT NULL"
        )
    )
    return int(result.rowcount)


@contextmanager
def _transfers_writable(dialect: str) -> Iterator[None]:
    """The append-only trigger on ledger_transfers set aside for the backfill, in this
    transaction only (PostgreSQL's DISABLE TRIGGER is transactional, SQLite's DDL too). Not
    restored on an error: the transaction rolls back, and that restores it."""
    if dialect == "postgresql":
        op.execute("ALTER TABLE ledger_transfers DISABLE TRIGGER ledger_transfers_append_only")
        yield
        op.execute("ALTER TABLE ledger_transfers ENABLE TRIGGER ledger_transfers_append_only")
        return
    op.execute("DROP TRIGGER ledger_transfers_no_update")
    yield
    op.execute(
        "CREATE TRIGGER ledger_transfers_no_update BEFORE UPDATE ON ledger_transfers "
        "BEGIN SELECT RAISE(ABORT, 'ledger_transfers is append-only: UPDATE refused'); END"
    )
