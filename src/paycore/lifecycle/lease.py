"""A worker's lease on a row, the same for every table that has one: who holds it
(`claimed_by`) and until when (`claimed_until_us`). A lease is taken, renewed and given up by a
compare-and-set on those two columns, so it holds across threads and processes, on SQLite and
PostgreSQL, with no lock held in memory; a holder that dies (kill -9) keeps it only until it
lapses.

Used for the rows a worker holds while it calls another system or runs long: the lifecycle's
work items (`store.claim_due`, which also moves `next_attempt_at_us`), a webhook endpoint
during its delivery turn (`webhooks.repository.claim_endpoints`) and a reconciliation day
during its run (`reconciliation.days`). Each function takes the table and the row's key
(`{"tenant_id": ..., "id": ...}`, or a day's `{"tenant_id": ..., "day": ...}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Select, Table, and_, or_, select, update

from paycore.lifecycle import per_tenant
from paycore.lifecycle.columns import CLAIMED_BY, CLAIMED_UNTIL_US

Key = Mapping[str, Any]  # column name -> value: one row of the table


def free(table: Table, now_us: int) -> ColumnElement[bool]:
    """The row's lease is not held at `now_us`: never taken, given up, or lapsed."""
    until = table.c[CLAIMED_UNTIL_US]
    return or_(until.is_(None), until < now_us)


def _row(table: Table, key: Key) -> ColumnElement[bool]:
    return and_(*(table.c[name] == value for name, value in key.items()))


def take(connection: Connection, table: Table, key: Key, holder: str, *, now_us: int, until_us: int) -> bool:
    """Lease the row to `holder` until `until_us` if nobody else holds it (a compare-and-set);
    True when `holder` has it now (taken, or already its own: extended)."""
    statement = update(table).where(_row(table, key), or_(free(table, now_us), table.c[CLAIMED_BY] == holder))
    return connection.execute(statement.values({CLAIMED_BY: holder, CLAIMED_UNTIL_US: until_us})).rowcount == 1


def renew(connection: Connection, table: Table, key: Key, holder: str, *, until_us: int) -> bool:
    """Extend `holder`'s lease; False when it no longer holds the row (another holder took it)."""
    statement = update(table).where(_row(table, key), table.c[CLAIMED_BY] == holder)
    return connection.execute(statement.values({CLAIMED_UNTIL_US: until_us})).rowcount == 1


def release(connection: Connection, table: Table, key: Key, holder: str) -> bool:
    """Give the lease up; False when `holder` no longer held it (another holder took it)."""
    statement = update(table).where(_row(table, key), table.c[CLAIMED_BY] == holder)
    return connection.execute(statement.values({CLAIMED_BY: None, CLAIMED_UNTIL_US: None})).rowcount == 1


def holder_of(connection: Connection, table: Table, key: Key) -> str | None:
    found: str | None = connection.execute(select(table.c[CLAIMED_BY]).where(_row(table, key))).scalar_one_or_none()
    return found


def claim(
    connection: Connection,
    table: Table,
    due: Select[Any],
    *,
    rank: ColumnElement[Any],
    limit: int,
    holder: str,
    until_us: int,
    values: Mapping[str, Any] | None = None,
) -> list[Row[Any]]:
    """Lease to `holder` up to `limit` rows `due` finds (it selects the table's `tenant_id` and
    `id` among rows whose lease is `free`, in the claim's order, unbounded), with `values` set
    beside the lease; the rows are returned as leased, tenant after tenant (in no particular order
    within one). Taken tenant by tenant (`per_tenant`:
    FOR UPDATE SKIP LOCKED with an equality on `tenant_id` on PostgreSQL, so concurrent claims
    take disjoint sets; SQLite has one writer, whose write transaction is already exclusive)."""
    lease = {CLAIMED_BY: holder, CLAIMED_UNTIL_US: until_us, **(values or {})}
    return per_tenant.flatten(per_tenant.claim(connection, table, due, rank=rank, limit=limit, mark=lease))
