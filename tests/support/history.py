"""A tenant's history, made in bulk from what the real paths wrote: every row of the tenant,
copied `copies` times by one `INSERT ... SELECT` per table, each copy's ids and keys suffixed
(`_h1`, `_h2`, ...) so that what referred to what still does: a payment's copy names its
transfer's copy, a transfer's copy its pending transfer's copy, an event's copy its object's.
For the plan tests (tests/integration/plans/) and `bench/history_bench.py`.

A copy keeps the accounts its rows move (`account_id`, `destination_account_id`,
`source_account_id`: the accounts are few and their history long, as in production) and takes
account sequences above any the path hands out. Configuration (the tenant, its keys, settings,
webhook endpoints, operators) is not history and is not copied. The copies break the books
(the accounts' cached totals do not count them): what reads them measures plans and costs,
never balances.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, Table, text

from paycore.db.engine import Database
from paycore.tables import metadata

# Tables whose rows are configuration: a tenant has a few, whatever its number of payments.
CONFIGURATION: Final = frozenset(
    {
        "tenants",
        "tenant_settings",
        "api_keys",
        "operators",
        "operator_sessions",
        "operator_sign_in_counts",
        "operator_sign_in_failures",
        "webhook_endpoints",
        "invariant_cursors",
        "reconciliation_days",
    }
)
# Tables of work in flight: a row is deleted in the transaction that finishes its work (a dispute
# answer whose reply was lost, deleted when the processor's word arrives: migration 0038), so a
# tenant holds the few in flight now, whatever its history.
IN_FLIGHT: Final = frozenset({"dispute_answers_in_flight"})
# Columns that name an account: a copy moves the same accounts.
_ACCOUNT_COLUMNS: Final = frozenset({"account_id", "destination_account_id", "source_account_id"})
# Columns that are an object's name or key, besides `id` and the `*_id` columns.
_NAMES: Final = frozenset({"idempotency_key", "key", "code", "dedupe_key", "finding_key"})
# A copy's account sequences start past this: far above any a test's transfers reach.
_SEQUENCE_OFFSET: Final = 10**12


def history_tables() -> list[Table]:
    return [
        table
        for table in metadata.sorted_tables
        if "tenant_id" in table.c and table.name not in CONFIGURATION and table.name not in IN_FLIGHT
    ]


def add_history(database: Database, tenant_id: str, copies: int, *, first: int = 1) -> dict[str, int]:
    """Copy every row the tenant had before any copy `copies` times, in one transaction, the
    copies numbered from `first` (a later call goes on from where the last one stopped); the
    rows added, by table."""
    added: dict[str, int] = {}

    def work(connection: Connection) -> None:
        for table in history_tables():
            added[table.name] = _copy(connection, table, tenant_id, first, first + copies - 1)

    database.transaction(work)
    return added


def _copy(connection: Connection, table: Table, tenant_id: str, first: int, last: int) -> int:
    if connection.dialect.name == "postgresql":
        source = "generate_series(CAST(:first AS BIGINT), CAST(:last AS BIGINT)) AS numbers (n)"
    else:
        source = (
            "(WITH RECURSIVE numbers (n) AS (SELECT :first UNION ALL SELECT n + 1 FROM numbers WHERE n < :last)"
            " SELECT n FROM numbers) AS numbers"
        )
    columns = [column.name for column in table.columns]
    values = ", ".join(_expression(name) for name in columns)
    find = "strpos" if connection.dialect.name == "postgresql" else "instr"
    originals = "".join(f" AND {find}(original.{name}, '_h') = 0" for name in _copied_keys(table))
    sql = (
        f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {values}"
        f" FROM {table.name} AS original, {source} WHERE original.tenant_id = :tenant{originals}"
    )
    parameters = {"tenant": tenant_id, "first": first, "last": last}
    return int(connection.execute(text(sql), parameters).rowcount)


def _copied_keys(table: Table) -> list[str]:
    """The table's key columns that a copy suffixes: a row with a suffix there is a copy."""
    return [column.name for column in table.primary_key.columns if _renamed(column.name)]


def _renamed(name: str) -> bool:
    named = name == "id" or name in _NAMES or (name.endswith("_id") and name != "tenant_id")
    return named and name not in _ACCOUNT_COLUMNS


def _expression(name: str) -> str:
    if name == "account_sequence":
        return f"original.{name} + {_SEQUENCE_OFFSET} + numbers.n * 1000000"
    if _renamed(name):
        return f"original.{name} || '_h' || CAST(numbers.n AS TEXT)"
    return f"original.{name}"
