"""What "a refused request changes nothing" means in a test: every table's row count, unchanged.

The one row a refusal adds is the audit log's record of it (issue 29: every refused money
request is in the audit log, findable by its idempotency key; tests/integration/http/
test_refusals_audited.py checks those records). That row is not a change of anything: it is
counted apart, so a refusal that moved money, made a key, or wrote any other event still fails.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, select, text

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.tables import metadata

_REFUSAL_RECORDS = and_(events.c.kind == "api_call", events.c.cause == "refused")


def row_counts(database: Database) -> dict[str, int]:
    """Rows per table, the audit log's records of refused requests apart (`refusals`)."""
    with database.read() as connection:
        counts = {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in metadata.tables.items()
        }
        refusals = connection.execute(select(func.count()).select_from(events).where(_REFUSAL_RECORDS)).scalar_one()
    counts["events"] -= refusals
    return counts


def named_rows(database: Database, tenant_id: str, queries: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Each query's rows of the tenant (`:t`), the tenant column checked and dropped, every id
    (a column `id` or `*_id`) replaced wherever it appears by its order of first appearance
    (`id0`, `id1`, ...): what two paths wrote for two tenants, comparable row for row."""
    with database.read() as connection:
        found = {
            table: [dict(row._mapping) for row in connection.execute(text(sql), {"t": tenant_id})]
            for table, sql in queries.items()
        }
    names: dict[str, str] = {}
    for rows in found.values():
        for row in rows:
            assert row.pop("tenant_id") == tenant_id
            for column, value in row.items():
                if (column == "id" or column.endswith("_id")) and isinstance(value, str) and value not in names:
                    names[value] = f"id{len(names)}"

    def named(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        for actual, name in names.items():
            value = value.replace(actual, name)
        return value

    return {
        table: [{column: named(value) for column, value in row.items()} for row in rows]
        for table, rows in found.items()
    }
