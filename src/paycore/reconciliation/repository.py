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
