"""The ledger's lookups by (tenant_id, id) get one index to choose: the primary key's.

PostgreSQL plans the foreign key checks of every entry INSERT once per connection, as a
generic plan. On a small table that has not been analyzed yet, every index leading with
tenant_id costs the same to the planner, and it picked `(tenant_id, reverses_id)` for the
transfers (and `(tenant_id, code)` for the accounts): each entry then read every transfer of
its tenant, for as long as the connection lived (docs/benchmarks.md, "The foreign keys'
plans"). So:

- ledger_transfers: the unique keys on pending_id, reverses_id and idempotency_key become
  partial unique indexes (`WHERE <column> IS NOT NULL`). What they refuse is unchanged (NULLs
  were never equal to each other), a plain transfer no longer adds three index entries, and
  a partial index cannot serve a lookup that does not name its column.
- ledger_accounts: the unique key on (tenant_id, code) becomes (code, tenant_id).

Code: the statements that name these keys as an ON CONFLICT target carry the index's
predicate (paycore.db.sql.insert_or_ignore), which both databases accept before and after
this revision. Code older than this revision's release names them without it, which a
partial index refuses: upgrade the code first, then the database.

Locks. PostgreSQL: the indexes are built inside the migration's transaction, under an ACCESS
EXCLUSIVE lock on each table, so transfers wait for the build (seconds per million rows).
SQLite: both tables are copied (batch mode) under the database's write lock, with foreign
keys off for the copy (checked, all of them, before this revision commits); the copy drops
the transfers' append-only triggers, which are created again here.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 03:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from paycore.db.migrate import check_sqlite_foreign_keys

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_PARTIAL = ("pending_id", "reverses_id", "idempotency_key")


def upgrade() -> None:
    if _postgres():
        for column in _PARTIAL:
            op.execute(f"ALTER TABLE ledger_transfers DROP CONSTRAINT uq_ledger_transfers_tenant_id_{column}")
            op.execute(
                f"CREATE UNIQUE INDEX uq_ledger_transfers_tenant_id_{column}"
                f" ON ledger_transfers (tenant_id, {column}) WHERE {column} IS NOT NULL"
            )
        op.execute(
            "ALTER TABLE ledger_accounts DROP CONSTRAINT uq_ledger_accounts_tenant_id_code,"
            " ADD CONSTRAINT uq_ledger_accounts_code_tenant_id UNIQUE (code, tenant_id)"
        )
        return
    _append_only_transfers(create=False)
    with op.batch_alter_table("ledger_transfers", schema=None, recreate="always") as batch_op:
        for column in _PARTIAL:
            batch_op.drop_constraint(f"uq_ledger_transfers_tenant_id_{column}", type_="unique")
    for column in _PARTIAL:
        op.create_index(
            f"uq_ledger_transfers_tenant_id_{column}",
            "ledger_transfers",
            ["tenant_id", column],
            unique=True,
            sqlite_where=sa.text(f"{column} IS NOT NULL"),
        )
    _append_only_transfers(create=True)
    with op.batch_alter_table("ledger_accounts", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint("uq_ledger_accounts_tenant_id_code", type_="unique")
        batch_op.create_unique_constraint("uq_ledger_accounts_code_tenant_id", ["code", "tenant_id"])
    check_sqlite_foreign_keys(op.get_bind())


def downgrade() -> None:
    if _postgres():
        for column in _PARTIAL:
            op.execute(f"DROP INDEX uq_ledger_transfers_tenant_id_{column}")
            op.execute(
                f"ALTER TABLE ledger_transfers ADD CONSTRAINT uq_ledger_transfers_tenant_id_{column}"
                f" UNIQUE (tenant_id, {column})"
            )
        op.execute(
            "ALTER TABLE ledger_accounts DROP CONSTRAINT uq_ledger_accounts_code_tenant_id,"
            " ADD CONSTRAINT uq_ledger_accounts_tenant_id_code UNIQUE (tenant_id, code)"
        )
        return
    for column in _PARTIAL:
        op.drop_index(f"uq_ledger_transfers_tenant_id_{column}", "ledger_transfers")
    _append_only_transfers(create=False)
    with op.batch_alter_table("ledger_transfers", schema=None, recreate="always") as batch_op:
        for column in _PARTIAL:
            batch_op.create_unique_constraint(f"uq_ledger_transfers_tenant_id_{column}", ["tenant_id", column])
    _append_only_transfers(create=True)
    with op.batch_alter_table("ledger_accounts", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint("uq_ledger_accounts_code_tenant_id", type_="unique")
        batch_op.create_unique_constraint("uq_ledger_accounts_tenant_id_code", ["tenant_id", "code"])
    check_sqlite_foreign_keys(op.get_bind())


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _append_only_transfers(*, create: bool) -> None:
    """SQLite's triggers of migration 0001 on ledger_transfers: the table copy drops them."""
    for operation in ("UPDATE", "DELETE"):
        if create:
            op.execute(
                f"CREATE TRIGGER ledger_transfers_no_{operation.lower()} BEFORE {operation} ON ledger_transfers "
                f"BEGIN SELECT RAISE(ABORT, 'ledger_transfers is append-only: {operation} refused'); END"
            )
        else:
            op.execute(f"DROP TRIGGER ledger_transfers_no_{operation.lower()}")
