"""Reading reconciliation's runs and breaks: what the controllers show (the HTTP API of issue
20, the console, `/metrics`) and the tests look at. No writes: reconciling a day, resolving a
break and a manual resolution's breaks are the service's (`service.py`), which is also what
other domains call.
"""

from __future__ import annotations

from typing import Any, Final, get_args

from sqlalchemy import Connection

from paycore.kit.errors import InvalidRequest, InvalidStartingAfter
from paycore.reconciliation import models, repository, states
from paycore.reconciliation.errors import BreakNotFound, RunNotFound
from paycore.reconciliation.matching import BreakType
from paycore.reconciliation.types import Break, Run, break_from_row, run_from_row

RUN_STATUSES: Final = models.RUN_STATUSES
BREAK_TYPES: Final[tuple[str, ...]] = get_args(BreakType)
BREAK_STATUSES: Final = models.BREAK_STATUSES


def run(connection: Connection, run_id: str) -> dict[str, Any] | None:
    row = repository.get_run(connection, run_id)
    return None if row is None else dict(row._mapping)


def breaks_of(connection: Connection, tenant_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in repository.breaks(connection, tenant_id, limit=limit)]


def breaks_by_type_and_status(connection: Connection) -> dict[tuple[str, str], int]:
    """Breaks over every tenant by (type, status): the metric's series."""
    return repository.breaks_by_type_and_status(connection)


def open_breaks_by_type(connection: Connection, *, tenant_id: str | None = None) -> dict[str, tuple[int, int]]:
    """Open breaks by type: (count, when the oldest was found), of one tenant or every one."""
    return repository.open_breaks_by_type(connection, tenant_id)


def runs_summary(connection: Connection) -> tuple[int, int | None]:
    """(items the reports resolved, when the newest completed run finished)."""
    return repository.runs_summary(connection)


# --- the HTTP API: runs and breaks as a tenant sees them --------------------------


def list_runs(connection: Connection, tenant_id: str, *, starting_after: str | None, limit: int) -> list[Run]:
    """Runs oldest first, each with the tenant's own break counts (one query for the page).
    `starting_after` is a run; anything else is refused."""
    if starting_after is not None and repository.get_run(connection, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a reconciliation run", param="starting_after")
    rows = [row._mapping for row in repository.run_page(connection, starting_after=starting_after, limit=limit)]
    counts = repository.break_counts_of_runs(connection, tenant_id, {row["id"]: row["day"] for row in rows})
    return [run_from_row(row, counts[row["id"]]) for row in rows]


def get_run(connection: Connection, tenant_id: str, run_id: str) -> Run:
    """The run with the tenant's own break counts, or RunNotFound."""
    row = repository.get_run(connection, run_id)
    if row is None:
        raise RunNotFound("no such reconciliation run", param="id")
    counts = repository.break_counts_of_runs(connection, tenant_id, {row.id: row.day})
    return run_from_row(row._mapping, counts[row.id])


def list_breaks(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    break_type: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Break]:
    """The tenant's breaks oldest first, in `status` and of `break_type` if given.
    `starting_after` is a break of the tenant, whatever its status or type."""
    if status is not None and status not in states.STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(states.STATUSES)}", param="status")
    if break_type is not None and break_type not in BREAK_TYPES:
        raise InvalidRequest(f"type must be one of {', '.join(BREAK_TYPES)}", param="type")
    if starting_after is not None and repository.get_break(connection, tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a break of this tenant", param="starting_after")
    rows = repository.break_page(
        connection, tenant_id, status=status, break_type=break_type, starting_after=starting_after, limit=limit
    )
    return [break_from_row(row._mapping) for row in rows]


def get_break(connection: Connection, tenant_id: str, break_id: str) -> Break:
    """The tenant's break, or BreakNotFound (also for another tenant's)."""
    row = repository.get_break(connection, tenant_id, break_id)
    if row is None:
        raise BreakNotFound("no such break", param="id")
    return break_from_row(row._mapping)


def recent_runs(connection: Connection, *, limit: int) -> list[dict[str, Any]]:
    """The newest runs with their volumes over every tenant (the platform's console)."""
    return [dict(row._mapping) for row in repository.recent_runs(connection, limit=limit)]


def breaks_of_any(
    connection: Connection,
    *,
    tenant_id: str | None,
    status: str | None,
    break_type: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Break]:
    """Breaks oldest first, of one tenant or of every one (None): the console's list."""
    if status is not None and status not in states.STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(states.STATUSES)}", param="status")
    if break_type is not None and break_type not in BREAK_TYPES:
        raise InvalidRequest(f"type must be one of {', '.join(BREAK_TYPES)}", param="type")
    rows = repository.breaks_any(
        connection, tenant_id, status=status, break_type=break_type, starting_after=starting_after, limit=limit
    )
    return [break_from_row(row._mapping) for row in rows]


def find_break(connection: Connection, break_id: str, *, tenant_id: str | None) -> Break | None:
    """The break with this id, in `tenant_id` or in any tenant when None (the console)."""
    row = repository.find_break(connection, break_id, tenant_id)
    return None if row is None else break_from_row(row._mapping)
