"""Every table a statement reads, and how, as its database planned it: SQLite's `EXPLAIN QUERY
PLAN` of the statement, PostgreSQL's own plans as they ran (auto_explain, nested statements
included: the server functions', the triggers', the foreign keys' checks).

A read of a history table is a scan of the tenant's history unless its index is searched by
equality on a whole unique key, or on a column that names one object (a transfer's entries,
an object's events, a payment's refunds). A full scan, an index read end to end, an index
searched by the tenant alone or by the tenant and a kind of row (`kind`, `status`, `type`),
or an index SQLite builds for the statement are each a scan of the tenant's history: its cost
grows with every payment the tenant ever made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Table

from tests.support.history import history_tables

# Columns that name one object: their rows are that object's few (its entries, its events, its
# refunds, its resolution), however long the tenant's history.
ONE_OBJECT: Final = frozenset(
    {
        "id",
        "transfer_id",
        "object_id",
        "payment_id",
        "payout_id",
        "event_id",
        "delivery_id",
        "pending_id",
        "reverses_id",
        "reference_id",
        "owner_id",
    }
)

# Indexes of work to do, read by a range of due times: an item leaves its queue's range when it
# is done (`next_attempt_at_us` NULL: `paycore.lifecycle.columns.UNSCHEDULED`; a payout leaves
# `scheduled` when it is queued), so the range holds what is due, never the tenant's history.
# The `tenant_` ones are the same queues led by the tenant, for claims tenant by tenant (0044).
WORK_QUEUES: Final = frozenset(
    {"ix_payments_queue", "ix_refunds_queue", "ix_payouts_due", "ix_payouts_next_attempt", "ix_processor_webhooks_due"}
    | {"ix_payments_tenant_queue", "ix_refunds_tenant_queue", "ix_payouts_tenant_queue", "ix_payouts_tenant_due"}
    | {"ix_processor_webhooks_tenant_due"}
)

# Partial indexes of open items, read whole by a gauge: an item leaves the index when it is done
# (a payment leaves `requires_capture` when captured, canceled or expired: migration 0034; a
# dispute leaves `needs_response` / `warning_needs_response` when answered or decided: 0037),
# so reading all of it reads the open ones, never the tenant's history.
OPEN_ITEMS: Final = frozenset({"ix_payments_authorizations_open", "ix_disputes_evidence_due"})


@dataclass(frozen=True)
class Read:
    """One table read by one statement: through `index` (None: the table itself, row by row),
    searched by equality on `equal` (empty: read end to end)."""

    table: str
    index: str | None
    equal: frozenset[str]
    searched: bool  # the index was searched (by equality or range), not read end to end
    built: bool  # an index the statement builds for itself (SQLite's automatic index)
    detail: str  # the plan's own words
    statement: str
    nested: bool = False  # a trigger's, a server function's or a foreign key check's statement


def _whole_keys(table: Table) -> list[frozenset[str]]:
    keys = [frozenset(column.name for column in table.primary_key.columns)]
    for constraint in table.constraints:
        if type(constraint).__name__ == "UniqueConstraint":
            keys.append(frozenset(column.name for column in constraint.columns))  # type: ignore[attr-defined]
    keys.extend(frozenset(column.name for column in index.columns) for index in table.indexes if index.unique)
    return keys


_HISTORY: Final = {table.name: table for table in history_tables()}


def why_history(read: Read) -> str | None:
    """Why `read` scans the tenant's history, or None if it reads a bounded set of rows."""
    table = _HISTORY.get(read.table)
    if table is None:
        return None  # configuration: a tenant has a few rows of it
    if read.built:
        return "an index built for the statement, from every row"
    if read.index in OPEN_ITEMS:
        return None  # read whole, it holds only the open items
    if read.index is None or not read.searched:
        return "every row, end to end"
    if read.index in WORK_QUEUES and read.searched:
        return None
    if read.equal & ONE_OBJECT or any(key <= read.equal for key in _whole_keys(table)):
        return None
    return f"searched by {', '.join(sorted(read.equal)) or 'a range'} only: every such row of the tenant"


# ------------------------------------------------------------------------------------ SQLite

_EQP: Final = re.compile(
    r"^(?P<op>SCAN|SEARCH) (?P<name>\S+)"
    r"(?: USING (?:(?P<auto>AUTOMATIC (?:PARTIAL )?)?(?:COVERING )?INDEX (?P<index>\S+)"
    r"|(?P<pk>(?:INTEGER )?PRIMARY KEY)))?"
    r"(?: \((?P<cond>[^)]*)\))?"
)
_NAMED: Final = re.compile(r'\b(?:FROM|JOIN|UPDATE|INTO)\s+"?(\w+)"?(?:\s+(?:AS\s+)?"?(\w+)"?)?', re.IGNORECASE)
_NOT_ALIASES: Final = frozenset(
    {"where", "join", "left", "inner", "outer", "cross", "on", "order", "group", "limit", "set", "values"}
    | {"union", "returning", "select", "as", "using"}
)


def aliases(sql: str) -> dict[str, str]:
    """The statement's names for tables: each table's own name and its aliases."""
    found: dict[str, str] = {}
    for table, alias in _NAMED.findall(sql):
        found[table] = table
        if alias and alias.lower() not in _NOT_ALIASES:
            found[alias] = table
    return found


def sqlite_reads(
    connection: Connection, sql: str, parameters: Sequence[Any] | Mapping[str, Any], *, nested: bool = False
) -> list[Read]:
    """The tables `sql` reads, from SQLite's EXPLAIN QUERY PLAN (with the parameters it ran with)."""
    driver = connection.connection.driver_connection
    assert driver is not None
    rows = driver.execute(f"EXPLAIN QUERY PLAN {sql}", parameters).fetchall()
    names = aliases(sql)
    reads = []
    for row in rows:
        detail = str(row[3])
        match = _EQP.match(detail)
        if match is None:
            continue
        table = names.get(match["name"], match["name"])
        condition = match["cond"] or ""
        terms = [term.strip() for term in condition.split(" AND ") if term.strip()]
        equal = frozenset(term[: -len("=?")] for term in terms if term.endswith("=?") and term[-3] not in "<>!")
        reads.append(
            Read(
                table=table,
                index=match["index"] or match["pk"],
                equal=equal,
                searched=match["op"] == "SEARCH",
                built=match["auto"] is not None,
                detail=detail,
                statement=sql,
                nested=nested,
            )
        )
    return reads


# -------------------------------------------------------------------------------- PostgreSQL

# auto_explain, on the connections of a test's database: every plan that runs (nested ones too)
# comes back to the client as a NOTICE, as JSON.
AUTO_EXPLAIN: Final = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
    "SET client_min_messages = notice",
)
_INDEX_TABLES: Final = "SELECT indexname, tablename FROM pg_indexes WHERE schemaname = current_schema()"
_EQUAL: Final = re.compile(r"\(*(?:\w+\.)?(\w+)\)*(?:::[a-z ]+(?:\[\])?)?\)* = ")


def index_tables(connection: Connection) -> dict[str, str]:
    return {str(index): str(table) for index, table in connection.exec_driver_sql(_INDEX_TABLES)}


def explained(message: str) -> dict[str, Any] | None:
    """The plan an auto_explain NOTICE carries, or None if the notice is something else."""
    _, found, plan = message.partition("plan:\n")
    return json.loads(plan) if found else None


def postgres_reads(explain: Mapping[str, Any], tables: Mapping[str, str]) -> list[Read]:
    """The tables one auto_explain plan reads; `tables`: each index's table."""
    statement = " ".join(str(explain.get("Query Text", "")).split())
    return [_node_read(node, tables, statement) for node in _nodes(explain["Plan"]) if _is_read(node)]


def _nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _is_read(node: Mapping[str, Any]) -> bool:
    return node["Node Type"] in ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan")


def _node_read(node: Mapping[str, Any], tables: Mapping[str, str], statement: str) -> Read:
    index = node.get("Index Name")
    table = node.get("Relation Name") or tables.get(str(index), str(index))
    condition = str(node.get("Index Cond", ""))
    detail = f"{node['Node Type']} on {table}" + (f" using {index}" if index else "")
    detail += f": {condition}" if condition else ""
    return Read(
        table=str(table),
        index=None if index is None else str(index),
        equal=frozenset(_EQUAL.findall(condition)),
        searched=bool(condition),
        built=False,
        detail=detail,
        statement=statement,
        nested=statement.startswith("SELECT 1 FROM ONLY") or "NEW." in statement,  # a key check, a trigger's
    )
