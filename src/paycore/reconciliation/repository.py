"""SQL for reconciliation runs and breaks. The repository owns their rows' shape."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import Connection, Row, delete, exists, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from paycore.db.sql import insert_or_ignore, keys_in
from paycore.reconciliation.models import (
    ALL_TENANTS,
    RUN_ID_PREFIX,
    reconciliation_breaks,
    reconciliation_days,
    reconciliation_fees,
    reconciliation_runs,
    reconciliation_seen,
)

SeenKey = tuple[str, str, str]  # (line type, tenant id, request id)
FeeKey = tuple[str, str, str]  # (tenant id, object type, object id)


def insert_run(connection: Connection, run_id: str, *, day: str, source: str, now_us: int) -> None:
    values = {"tenant_id": ALL_TENANTS, "id": run_id, "day": day, "source": source, "status": "running"}
    counts = {"lines_read": 0, "matched": 0, "breaks_found": 0, "resolved": 0}
    connection.execute(insert(reconciliation_runs).values(**values, **counts, created_at_us=now_us))


def finish_run(connection: Connection, run_id: str, values: Mapping[str, Any]) -> None:
    statement = update(reconciliation_runs).where(
        reconciliation_runs.c.tenant_id == ALL_TENANTS,
        reconciliation_runs.c.id == run_id,
        reconciliation_runs.c.status == "running",
    )
    assert connection.execute(statement.values(**values, status="completed")).rowcount == 1, run_id


def add_resolved(connection: Connection, run_id: str, *, count: int) -> None:
    """Count items a completed run moved after its last chunk (an expiry its reports imply)."""
    table = reconciliation_runs.c
    statement = update(reconciliation_runs).where(table.tenant_id == ALL_TENANTS, table.id == run_id)
    assert connection.execute(statement.values(resolved=table.resolved + count)).rowcount == 1, run_id


def abandon_run(connection: Connection, run_id: str, *, now_us: int) -> bool:
    """Compare-and-set `running` -> `abandoned`: True only for the one caller that moved it."""
    table = reconciliation_runs.c
    statement = update(reconciliation_runs).where(
        table.tenant_id == ALL_TENANTS, table.id == run_id, table.status == "running"
    )
    return connection.execute(statement.values(status="abandoned", finished_at_us=now_us)).rowcount == 1


def running_runs_of_day(connection: Connection, day: str, *, other_than: str, limit: int) -> list[str]:
    table = reconciliation_runs.c
    query = (
        select(table.id)
        .where(table.tenant_id == ALL_TENANTS, table.day == day, table.status == "running", table.id != other_than)
        .order_by(table.id)
        .limit(limit)
    )
    return [str(run_id) for run_id in connection.execute(query).scalars()]


def lapsed_runs(connection: Connection, *, now_us: int, limit: int) -> list[tuple[str, str]]:
    """(run id, day) of the runs still `running` that do not hold a live lease on their day:
    their lease lapsed (or was given up without the run being marked)."""
    runs, leases = reconciliation_runs.c, reconciliation_days.c
    alive = exists().where(
        leases.tenant_id == ALL_TENANTS,
        leases.day == runs.day,
        leases.claimed_by == runs.id,
        leases.claimed_until_us >= now_us,
    )
    query = (
        select(runs.id, runs.day)
        .where(runs.tenant_id == ALL_TENANTS, runs.status == "running", ~alive)
        .order_by(runs.id)
        .limit(limit)
    )
    return [(str(run_id), str(day)) for run_id, day in connection.execute(query)]


def get_run(connection: Connection, run_id: str) -> Row[Any] | None:
    query = select(reconciliation_runs).where(
        reconciliation_runs.c.tenant_id == ALL_TENANTS, reconciliation_runs.c.id == run_id
    )
    return connection.execute(query).first()


def _insert_ignoring_conflicts(connection: Connection) -> Any:
    return postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert


def analyze_staging(connection: Connection) -> None:
    """Refresh PostgreSQL's statistics of the tables a run fills as it goes (the lines seen, the
    fees). Planned with the statistics of a nearly empty table, the chunk's lookups by primary
    key and each missing-line page became sequential scans of every row so far: measured,
    seconds per page at 300k lines, quadratic in the report. SQLite plans by the key without."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("ANALYZE reconciliation_seen, reconciliation_fees"))


def forget_seen_of_day(connection: Connection, day: str, *, keep_run_id: str) -> None:
    """Delete the lines seen by the day's other runs: the latest complete run's are kept."""
    runs = select(reconciliation_runs.c.id).where(
        reconciliation_runs.c.day == day, reconciliation_runs.c.id != keep_run_id
    )
    connection.execute(delete(reconciliation_seen).where(reconciliation_seen.c.run_id.in_(runs)))


def forget_seen_of_run(connection: Connection, run_id: str) -> None:
    connection.execute(delete(reconciliation_seen).where(reconciliation_seen.c.run_id == run_id))


def latest_completed_run(connection: Connection, day: str) -> str | None:
    table = reconciliation_runs.c
    query = (
        select(table.id)
        .where(table.tenant_id == ALL_TENANTS, table.day == day, table.status == "completed")
        .order_by(table.finished_at_us.desc(), table.id.desc())
        .limit(1)
    )
    found: str | None = connection.execute(query).scalar()
    return found


def fees_of(connection: Connection, keys: Collection[FeeKey]) -> dict[FeeKey, int]:
    """The processor's fee booked for each of these objects that has one (one statement)."""
    if not keys:
        return {}
    table = reconciliation_fees.c
    query = select(table.tenant_id, table.object_type, table.object_id, table.fee_minor).where(
        keys_in((table.tenant_id, table.object_type, table.object_id), keys)
    )
    return {(tenant, kind, object_id): int(fee) for tenant, kind, object_id, fee in connection.execute(query)}


def insert_fees(connection: Connection, rows: list[dict[str, Any]]) -> list[Row[Any]]:
    """Record each object's fee unless one is recorded already; returns the rows recorded now."""
    if not rows:
        return []
    table = reconciliation_fees.c
    statement = (
        _insert_ignoring_conflicts(connection)(reconciliation_fees)
        .on_conflict_do_nothing()
        .returning(table.tenant_id, table.currency, table.fee_minor)
    )
    return list(connection.execute(statement, rows))


def mark_break_seen(connection: Connection, tenant_id: str, day: str, finding_key: str, run_id: str) -> None:
    """The run met this (open) finding again: it is not superseded when the run ends."""
    table = reconciliation_breaks.c
    statement = update(reconciliation_breaks).where(
        table.tenant_id == tenant_id, table.day == day, table.finding_key == finding_key, table.status == "open"
    )
    connection.execute(statement.values(seen_run_id=run_id))


def open_breaks_not_seen_by(connection: Connection, day: str, run_id: str, *, limit: int) -> list[Row[Any]]:
    """Open breaks of the day that the run did not find again (a corrected report dropped them)."""
    table = reconciliation_breaks.c
    query = select(reconciliation_breaks).where(
        table.day == day,
        table.status == "open",
        func.coalesce(table.seen_run_id, table.run_id) != run_id,
        table.run_id.like(f"{RUN_ID_PREFIX}%"),  # a report's findings, not a webhook's (ADR 0016)
    )
    return list(connection.execute(query.order_by(table.tenant_id, table.id).limit(limit)))


def open_breaks_of_run(connection: Connection, day: str, run_id: str, *, limit: int) -> list[Row[Any]]:
    """Open breaks the run stored (not the ones it only met again: those are an earlier run's)."""
    table = reconciliation_breaks.c
    query = select(reconciliation_breaks).where(table.day == day, table.run_id == run_id, table.status == "open")
    return list(connection.execute(query.order_by(table.tenant_id, table.id).limit(limit)))


def breaks_naming(
    connection: Connection, tenant_id: str, object_id: str, *, open_only: bool, limit: int
) -> list[Row[Any]]:
    table = reconciliation_breaks.c
    query = select(reconciliation_breaks).where(table.tenant_id == tenant_id, table.object_id == object_id)
    if open_only:
        query = query.where(table.status == "open")
    return list(connection.execute(query.order_by(table.id).limit(limit)))


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


def open_breaks_by_type(connection: Connection, tenant_id: str | None) -> dict[str, tuple[int, int]]:
    """Open breaks by type: (count, the oldest's creation), of one tenant or every one."""
    table = reconciliation_breaks.c
    query = (
        select(table.type, func.count(), func.min(table.created_at_us))
        .where(table.status == "open")
        .group_by(table.type)
    )
    if tenant_id is not None:
        query = query.where(table.tenant_id == tenant_id)
    return {kind: (int(count), int(oldest)) for kind, count, oldest in connection.execute(query)}


def runs_summary(connection: Connection) -> tuple[int, int | None]:
    """(items resolved by every completed run, when the newest one finished)."""
    query = select(
        func.coalesce(func.sum(reconciliation_runs.c.resolved), 0), func.max(reconciliation_runs.c.finished_at_us)
    ).where(reconciliation_runs.c.status == "completed")
    resolved, finished_at_us = connection.execute(query).one()
    return int(resolved), finished_at_us


# --- the HTTP API's reads and a break's status change ------------------------------


def get_break(connection: Connection, tenant_id: str, break_id: str) -> Row[Any] | None:
    query = select(reconciliation_breaks).where(
        reconciliation_breaks.c.tenant_id == tenant_id, reconciliation_breaks.c.id == break_id
    )
    return connection.execute(query).first()


def find_break(connection: Connection, break_id: str, tenant_id: str | None) -> Row[Any] | None:
    query = select(reconciliation_breaks).where(reconciliation_breaks.c.id == break_id)
    if tenant_id is not None:
        query = query.where(reconciliation_breaks.c.tenant_id == tenant_id)
    return connection.execute(query.limit(1)).first()


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


def recent_runs(connection: Connection, *, limit: int) -> list[Row[Any]]:
    table = reconciliation_runs
    query = select(table).where(table.c.tenant_id == ALL_TENANTS).order_by(table.c.id.desc()).limit(limit)
    return list(connection.execute(query))


def breaks_any(
    connection: Connection,
    tenant_id: str | None,
    *,
    status: str | None,
    break_type: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Row[Any]]:
    """Breaks oldest first, of one tenant or every one (the console)."""
    table = reconciliation_breaks.c
    query = select(reconciliation_breaks)
    if tenant_id is not None:
        query = query.where(table.tenant_id == tenant_id)
    if status is not None:
        query = query.where(table.status == status)
    if break_type is not None:
        query = query.where(table.type == break_type)
    if starting_after is not None:
        query = query.where(table.id > starting_after)
    return list(connection.execute(query.order_by(table.id).limit(limit)))


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


# --- The scheduled job (reconciliation/rounds.py): the days already reconciled ---------------


def days_completed(connection: Connection, *, source: str, days: list[str]) -> set[str]:
    """The days among `days` that have a completed run from `source`."""
    if not days:
        return set()
    query = (
        select(reconciliation_runs.c.day)
        .where(
            reconciliation_runs.c.tenant_id == ALL_TENANTS,
            reconciliation_runs.c.day.in_(days),
            reconciliation_runs.c.source == source,
            reconciliation_runs.c.status == "completed",
        )
        .distinct()
    )
    return {str(day) for day in connection.execute(query).scalars()}
