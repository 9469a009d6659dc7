"""What a run does after its last chunk (ADR 0014): find the money paycore believes moved that
the report has no line for (`missing_at_processor`), supersede the open breaks of the day that
this run did not find again (the report they came from was replaced by a corrected one), and
forget the lines the day's earlier runs read. Superseding happens in the transaction that marks
the run completed: a run killed before it supersedes nothing, so an abandoned run
never leaves an earlier run's breaks half superseded.

`missing_at_processor` looks, page by page over each kind's table, at the objects whose money
paycore believes moved in the day's window, and asks the lines this run (and the previous day's
latest run) read which of them the report named: memory stays bounded whatever the day's size.
The window is the day shifted back by the grace: an item created in the last `grace_ms` of the
day (or of the time before the run, for a day not over yet) may be in the next day's report,
and waits for it; the next day's window starts where this one ends.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.kit import clock
from paycore.payouts import service as payouts
from paycore.reconciliation import chunks, repository, staging, states
from paycore.reconciliation.errors import BreakNotOpen
from paycore.reconciliation.matching import Finding, Kind, Known
from paycore.reconciliation.types import break_from_row

PAGE_ITEMS: Final = 1_000  # objects per page of the missing-line check, one transaction each
SUPERSEDE_BATCH: Final = 500
CAUSE: Final = "corrected_report"  # why a break is superseded

_LINE_OF: Final[dict[Kind, str]] = {
    "payment": "charge",
    "refund": "refund",
    "payout": "payout",
    "dispute": "dispute_withdrawal",  # a chargeback's money moved: its withdrawal (SPEC §6.2)
}


@dataclass(frozen=True)
class Window:
    start_us: int
    end_us: int
    run_ids: tuple[str, ...]  # the runs whose lines count as the report's


def window(day: str, *, grace_ms: int, started_us: int, previous_run_id: str | None, run_id: str) -> Window:
    start = clock.day_start_us(dt.date.fromisoformat(day))
    end = min(start + clock.DAY_US, started_us)
    runs = (run_id,) if previous_run_id is None else (run_id, previous_run_id)
    return Window(start - grace_ms * 1000, end - grace_ms * 1000, runs)


def previous_day(day: str) -> str:
    return (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()


def missing_page(
    connection: Connection, kind: Kind, after: tuple[str, str] | None, span: Window, context: chunks.Context
) -> tuple[int, tuple[str, str] | None]:
    """Store `missing_at_processor` for one page of the objects of `kind` that no line named
    (`staging.unnamed`: one anti-join); (breaks stored, where the next page starts, None after
    the last)."""
    line_type = _LINE_OF[kind]
    items = staging.unnamed(
        connection, kind, window_us=(span.start_us, span.end_us), run_ids=span.run_ids, after=after, limit=PAGE_ITEMS
    )
    stored = 0
    for tenant_id, item_id, stored_status, amount_minor, currency in items:
        status = payouts.public_status(stored_status) if kind == "payout" else stored_status
        known = Known(kind, item_id, status, amount_minor, currency)
        finding = Finding("missing_at_processor", f"no {line_type} line for {kind} {item_id} ({status})")
        key = f"missing_at_processor:{line_type}:{item_id}"
        stored += chunks.store(connection, context, tenant_id, key, finding, None, known)
    if len(items) < PAGE_ITEMS:
        return stored, None
    return stored, (items[-1][0], items[-1][1])


def supersede_unmet(connection: Connection, day: str, run_id: str, *, actor: str, now_us: int) -> int:
    """Supersede every open break of the day this run did not meet, a batch at a time, in the
    caller's transaction (the one that completes the run: superseding is whole or not at all);
    returns how many. Each batch leaves fewer such breaks: it ends."""
    superseded = 0
    while True:
        found, moved = supersede_batch(connection, day, run_id, actor=actor, now_us=now_us)
        superseded += moved
        if found < SUPERSEDE_BATCH:
            return superseded


def supersede_batch(connection: Connection, day: str, run_id: str, *, actor: str, now_us: int) -> tuple[int, int]:
    """Supersede up to SUPERSEDE_BATCH open breaks of the day this run did not meet:
    (breaks found, breaks superseded)."""
    rows = repository.open_breaks_not_seen_by(connection, day, run_id, limit=SUPERSEDE_BATCH)
    moved = 0
    for row in rows:
        try:
            states.move(
                connection, break_from_row(row._mapping), states.SUPERSEDED, cause=CAUSE, actor=actor, now_us=now_us
            )
        except BreakNotOpen:
            continue  # a person resolved it meanwhile
        moved += 1
    return len(rows), moved
