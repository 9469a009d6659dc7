"""SQL for reconciliation runs and breaks. The repository owns their rows' shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from paycore.db.sql import insert_or_ignore
from paycore.reconciliation.models import ALL_TENANTS, reconciliation_breaks, reconciliation_runs


def insert_run(connection: Connection, run_id: str, *, day: str, source: str, now_us: int) -> None:
    values = {"tenant_id": ALL_TENANTS, "id": run_id, "day": day, "source": source, "status": "running"}
    counts = {"lines_read": 0, "matched": 0, "breaks_found": 0, "resolved": 0}
    connection.execute(insert(reconciliation_runs).values(**values, **counts, created_at_us=now_us))


def finish_run(connection: Connection, run_id: str, values: Mapping[str, Any]) -> None:
    statement = update(reconciliation_runs).where(
        reconciliation_runs.c.tenant_id == ALL_TENANTS, reconciliation_runs.c.id == run_id
    )
    connection.execute(statement.values(**values, status="completed"))


def get_run(connection: Connection, run_id: str) -> Row[Any] | None:
    query = select(reconciliation_runs).where(
        reconciliation_runs.c.tenant_id == ALL_TENANTS, reconciliation_runs.c.id == run_id
    )
    return connection.execute(query).first()


def insert_break(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when stored; False when the tenant's day already has this finding."""
    return insert_or_ignore(connection, reconciliation_breaks, values, ("tenant_id", "day", "finding_key"))


def breaks(connection: Connection, tenant_id: str, *, limit: int) -> list[Row[Any]]:
    query = select(reconciliation_breaks).where(reconciliation_breaks.c.tenant_id == tenant_id)
    return list(connection.execute(query.order_by(reconciliation_breaks.c.id).limit(limit)))


def count_breaks(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(reconciliation_breaks)).scalar_one())


def breaks_by_type_and_status(connection: Connection) -> dict[tuple[str, str], int]:
    query = select(reconciliation_breaks.c.type, reconciliation_breaks.c.status, func.count()).group_by(
        reconciliation_breaks.c.type, reconciliation_breaks.c.status
    )
    return {(kind, status): int(count) for kind, status, count in connection.execute(query)}


def runs_summary(connection: Connection) -> tuple[int, int | None]:
    """(items resolved by every completed run, when the newest one finished)."""
    query = select(
        func.coalesce(func.sum(reconciliation_runs.c.resolved), 0), func.max(reconciliation_runs.c.finished_at_us)
    ).where(reconciliation_runs.c.status == "completed")
    resolved, finished_at_us = connection.execute(query).one()
    return int(resolved), finished_at_us


# --- the HTTP API's reads and a break's status change (issue 20) ------------------------------


def get_break(connection: Connection, tenant_id: str, break_id: str) -> Row[Any] | None:
    query = select(reconciliation_breaks).where(
        reconciliation_breaks.c.tenant_id == tenant_id, reconciliation_breaks.c.id == break_id
    )
    return connection.execute(query).first()


def break_status(connection: Connection, tenant_id: str, break_id: str) -> str | None:
    query = select(reconciliation_breaks.c.status).where(
        reconciliation_breaks.c.tenant_id == tenant_id, reconciliation_breaks.c.id == break_id
    )
    found = connection.execute(query).scalar_one_or_none()
    return None if found is None else str(found)


def break_page(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    break_type: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Row[Any]]:
    """The tenant's breaks by id (time-ordered), oldest first, after `starting_after`."""
    table = reconciliation_breaks
    query = select(table).where(table.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(table.c.status == status)
    if break_type is not None:
        query = query.where(table.c.type == break_type)
    if starting_after is not None:
        query = query.where(table.c.id > starting_after)
    return list(connection.execute(query.order_by(table.c.id).limit(limit)))


def change_break_status(
    connection: Connection, tenant_id: str, break_id: str, from_status: str, values: Mapping[str, Any]
) -> bool:
    """Compare-and-set: True only if the break was still in `from_status`."""
    statement = update(reconciliation_breaks).where(
        reconciliation_breaks.c.tenant_id == tenant_id,
        reconciliation_breaks.c.id == break_id,
        reconciliation_breaks.c.status == from_status,
    )
    return connection.execute(statement.values(**values)).rowcount == 1


def run_page(connection: Connection, *, starting_after: str | None, limit: int) -> list[Row[Any]]:
    """Runs by id (time-ordered), oldest first, after `starting_after`."""
    table = reconciliation_runs
    query = select(table).where(table.c.tenant_id == ALL_TENANTS)
    if starting_after is not None:
        query = query.where(table.c.id > starting_after)
    return list(connection.execute(query.order_by(table.c.id).limit(limit)))


def break_counts_of_runs(connection: Connection, tenant_id: str, runs: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """The tenant's breaks each run stored, by type: one GROUP BY for a page of runs (`runs`:
    run id -> its day). The day narrows the scan to the (tenant, day, finding) key's index."""
    if not runs:
        return {}
    table = reconciliation_breaks
    query = (
        select(table.c.run_id, table.c.type, func.count())
        .where(
            table.c.tenant_id == tenant_id,
            table.c.day.in_(sorted(set(runs.values()))),
            table.c.run_id.in_(sorted(runs)),
        )
        .group_by(table.c.run_id, table.c.type)
    )
    counts: dict[str, dict[str, int]] = {run_id: {} for run_id in runs}
    for run_id, kind, count in connection.execute(query):
        counts[run_id][kind] = int(count)
    return counts
