"""On PostgreSQL, a lookup by a key has one index to choose: the key's own.

PostgreSQL checks a foreign key with a query it plans once per connection, as a generic plan
(no parameter values), and psycopg's prepared statements get generic plans too. On a table
that is small and not yet analyzed (a new database; a server with autovacuum off) every index
leading with the same column costs the same to the planner. It picked the transfers'
(tenant_id, reverses_id) index to check each entry's transfer, and kept scanning every
transfer of the tenant, for every entry, for as long as the connection lived
(docs/benchmarks.md, "The foreign keys' plans"). These tests plan those lookups on the
freshly migrated test database, as generic plans, and require the key's own index with every
key column in its condition (no row read and then filtered out).

SQLite needs no such test: its foreign key checks look the parent up through the parent key's
own index, without a planner choice.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import Connection, ForeignKeyConstraint, Table

from paycore.db.engine import Database
from paycore.ledger import repository
from paycore.tables import metadata

FOREIGN_KEYS = sorted(
    (constraint for table in metadata.tables.values() for constraint in table.foreign_key_constraints),
    key=lambda constraint: str(constraint.name),
)
# The transfer path's statements that find accounts, on every transfer: statement, the index
# it must use, the columns that index must be searched by.
MONEY_PATH_STATEMENTS = {
    "read accounts by id": (repository._get_accounts_statement("id", 2), "pk_ledger_accounts", ["tenant_id", "id"]),
    "read accounts by code": (
        repository._get_accounts_statement("code", 2),
        "uq_ledger_accounts_code_tenant_id",
        ["code", "tenant_id"],
    ),
    "apply totals": (repository._APPLY_TOTALS, "pk_ledger_accounts", ["tenant_id", "id"]),
}


def generic_plan(connection: Connection, sql: str, parameters_count: int) -> str:
    """EXPLAIN of the generic plan of `sql` (placeholders $1, $2, ...)."""
    connection.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
    connection.exec_driver_sql(f"PREPARE key_lookup AS {sql}")
    try:
        values = ", ".join(["'0'"] * parameters_count)  # typed by the statement; never run
        return "\n".join(row[0] for row in connection.exec_driver_sql(f"EXPLAIN EXECUTE key_lookup ({values})"))
    finally:
        connection.exec_driver_sql("DEALLOCATE key_lookup")
        connection.exec_driver_sql("RESET plan_cache_mode")


def assert_key_index(plan: str, index: str, columns: list[str]) -> None:
    """Every scan of the plan uses `index`, with every one of `columns` in its condition."""
    scans = [line for line in plan.splitlines() if " Scan " in line or line.startswith("Seq Scan")]
    conditions = [line for line in plan.splitlines() if "Index Cond:" in line]
    assert scans and all(re.search(f"Index (Only )?Scan using {index} ", line) for line in scans), plan
    assert len(conditions) == len(scans), plan
    for condition in conditions:
        for column in columns:
            assert f"({column})::text = " in condition, plan


@pytest.fixture
def postgres(database: Database, backend: str) -> Database:
    if backend != "postgres":
        pytest.skip("a PostgreSQL planner choice: SQLite's foreign keys use the parent key's index")
    return database


@pytest.mark.parametrize("foreign_key", FOREIGN_KEYS, ids=lambda constraint: str(constraint.name))
def test_each_foreign_key_check_uses_the_referenced_key(postgres: Database, foreign_key: ForeignKeyConstraint) -> None:
    referred: Table = foreign_key.referred_table
    columns = [element.column.name for element in foreign_key.elements]
    assert columns == [column.name for column in referred.primary_key.columns]  # the index named below
    where = " AND ".join(f'"{column}"::text = ${n}::text' for n, column in enumerate(columns, start=1))
    sql = f'SELECT 1 FROM ONLY "{referred.name}" x WHERE {where} FOR KEY SHARE OF x'  # as PostgreSQL checks it
    with postgres.engine.connect() as connection:
        plan = generic_plan(connection, sql, len(columns))
    assert_key_index(plan, f"pk_{referred.name}", columns)
    assert "Filter:" not in plan, plan  # no row read only to be thrown away


@pytest.mark.parametrize("name", sorted(MONEY_PATH_STATEMENTS))
def test_the_money_path_finds_accounts_by_a_whole_key(postgres: Database, name: str) -> None:
    statement, index, columns = MONEY_PATH_STATEMENTS[name]
    sql = statement.postgresql
    parameters_count = sql.count("%s")
    for n in range(1, parameters_count + 1):
        sql = sql.replace("%s", f"${n}", 1)
    with postgres.engine.connect() as connection:
        plan = generic_plan(connection, sql, parameters_count)
    assert_key_index(plan, index, columns)


# The server functions that read a hold's entries in their accounts' order (the order every
# transfer locks its accounts in), and what they run to read them (migration 0054).
HOLD_READERS = (
    "paycore_payments_settle",
    "paycore_payments_capture_finish",
    "paycore_payments_cancel_finish",
    "paycore_hold_resolve",
    "paycore_payouts_cancel",
)
_HOLD_READ = re.compile(r"FOR \w+ IN\s+(SELECT \w\.account_id, [^;]*?ORDER BY \w\.account_id)\s+LOOP", re.DOTALL)


@pytest.mark.parametrize("function", HOLD_READERS)
def test_a_hold_s_entries_are_read_by_their_transfer_s_index(postgres: Database, function: str) -> None:
    """A PL/pgSQL statement keeps the generic plan its connection made first: made while the
    tables were small, an `ORDER BY account_id` was delivered by the entries' (tenant, account,
    sequence) index searched by the tenant alone, every entry of the tenant read for each
    payment settled (bench/history_bench.py: 5.27x the CPU a payment after 100,000 payments)."""
    with postgres.engine.connect() as connection:
        body = connection.exec_driver_sql(f"SELECT prosrc FROM pg_proc WHERE proname = '{function}'").scalars().all()
        reads = [match.group(1) for source in body for match in _HOLD_READ.finditer(source)]
        assert len(reads) == 1, (function, len(reads))
        sql = reads[0].replace("p_tenant_id", "$1").replace("p_transfer_id", "$2")
        plan = generic_plan(connection, sql, 2)
    assert_key_index(plan, "ix_ledger_entries_transfer", ["tenant_id", "transfer_id"])
