"""Reconciling one day's settlement report (ADR 0014, docs/reconciliation.md).

`reconcile(database, lines)` takes the day's lease (`days`: one run of a day at a time, across
processes; `DayBusy` otherwise), reads the report as it comes (`report.read`), in chunks of
`CHUNK_LINES` lines, one transaction per chunk (`chunks`: lines recorded, objects loaded in one
statement per kind, judged, breaks stored, proofs applied through each object's lifecycle with
cause `settlement_report`, fees booked once), then closes the run (`closing`: the money the
report has no line for, then in the one transaction that completes the run, the open breaks a
corrected report no longer has, superseded); once it completed, it resolves the in-doubt
captures whose authorization's expiry the complete reports imply (`expiry`). A file that is not
a report is refused before anything is written (`NotAReport`). Running the same report again stores nothing new, books
nothing and moves nothing.

A run that does not complete is `abandoned` and its breaks are rolled back: at once
when it stops on an error, or, when it cannot say so (killed), by the next run of its day or a
worker's look (`abandon_lapsed`) once its lease lapsed. A day's open breaks are never half a run's.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, TypeVar

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.kit import actors, clock, ids
from paycore.kit.errors import InvalidRequest
from paycore.lifecycle import faults
from paycore.lifecycle.evidence import MANUAL_CAUSE
from paycore.processor.port import Processor
from paycore.reconciliation import (
    chunks,
    closing,
    days,
    expiry,
    matching,
    queries,
    repository,
    states,
    unknown_disputes,
)
from paycore.reconciliation.chunks import Context, Counts
from paycore.reconciliation.errors import DayBusy, UnknownResolution
from paycore.reconciliation.matching import Finding, Kind, Known
from paycore.reconciliation.moves import CAUSE
from paycore.reconciliation.report import Malformed, NotAReport, Staged, created_at_us_of, encoded, read_staged
from paycore.reconciliation.types import Abandoned, Break, break_from_row

CHUNK_LINES: Final = 500  # lines of the first chunk (read before the run writes anything)
CHUNK_LINES_MAX: Final = 16_000  # each chunk doubles the last one's lines up to this: one transaction each
GRACE_MS_DEFAULT: Final = 3_600_000  # PAYCORE_RECONCILE_GRACE_MS's default
SOURCES: Final = ("file", "processor")
LAPSED_RUNS_MAX: Final = 100  # runs abandoned per look (more: the next look)
_KINDS: Final[tuple[Kind, ...]] = ("payment", "refund", "payout", "dispute")

__all__ = ["CAUSE", "reconcile"]

Progress = Callable[[int], None]
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class Summary:
    run_id: str
    day: str
    lines_read: int = 0
    matched: int = 0
    breaks: Counter[str] = field(default_factory=Counter)  # breaks stored by this run, by type
    resolved: int = 0  # items the report moved
    fees_booked: int = 0  # objects whose processor fee this run booked
    fees_minor: Counter[str] = field(default_factory=Counter)  # the fees booked, by currency
    superseded: int = 0  # open breaks of the day a corrected report no longer has
    disputes_recorded: int = 0  # disputes its lines named that the processor's answers made or moved
    abandoned: list[Abandoned] = field(default_factory=list)  # dead runs of its day it abandoned


def reconcile(
    database: Database,
    lines: Iterable[str],
    *,
    source: str = "file",
    day: str | None = None,
    progress: Progress | None = None,
    grace_ms: int = GRACE_MS_DEFAULT,
    lease_ms: int = days.DAY_LEASE_MS,
    processor: Processor | None = None,
) -> Summary:
    """Reconcile the report in `lines` (text lines); the day is `day` or the first line's.
    With `processor`, a dispute line naming a dispute paycore does not know makes paycore ask
    the processor for it first (`unknown_disputes`); without, it is `missing_in_paycore`.

    A run that stops before it completes (an error, NotAReport half-way through a stream,
    Ctrl-C, its lease lost) is abandoned as it stops, its breaks rolled back; one that cannot
    even do that (killed) is abandoned once its lease lapses (`days`)."""
    assert source in SOURCES
    digest = hashlib.sha256()
    items = read_staged(_hashed(lines, digest))
    # Up to the first good line (the header is read here: NotAReport now writes nothing).
    leading = list(itertools.islice(items, CHUNK_LINES))
    if day is None:
        first = next((item for item in leading if not isinstance(item, Malformed)), None)
        if first is None:
            raise NotAReport(f"no line among the first {len(leading)} gives the day: give it (--day YYYY-MM-DD)")
        day = clock.utc_day(created_at_us_of(first)).isoformat()
    run_id = ids.new_id("rcn")
    actor = actors.reconcile(run_id)  # who the audit log says acted: the run
    started_us = clock.now_us()
    start = partial(_start, day=day, run_id=run_id, source=source, actor=actor, now_us=started_us, lease_ms=lease_ms)
    abandoned = database.transaction(start)
    try:
        counts = Counts()
        recorded = 0
        for number, chunk in enumerate(_chunks(leading, items)):
            if processor is not None:  # no transaction open: the processor is asked here
                recorded += unknown_disputes.learn(database, processor, chunk.rows, actor=actor, lease_ms=lease_ms)
            now_us = clock.now_us()
            context = Context(run_id, day, actor, now_us, number)
            if number and number & (number + 1) == 0:  # after 1, 3, 7, 15, ... chunks: log2 of the lines
                database.transaction(repository.analyze_staging)
            done = faults.transaction(database, partial(_chunk, chunk=chunk, context=context, lease_ms=lease_ms))
            counts.add(done)
            if progress is not None:
                progress(done.lines)
        close_context = Context(run_id, day, actor, clock.now_us(), -1)
        sha256 = digest.hexdigest()
        summary = _close(
            database, counts, sha256, close_context, grace_ms=grace_ms, started_us=started_us, lease_ms=lease_ms
        )
    except BaseException:
        _give_up(database, day=day, run_id=run_id, actor=actor)
        raise
    summary.abandoned = abandoned
    summary.disputes_recorded = recorded
    # After the run completed: its day's report is now one of the complete ones (`expiry`).
    summary.resolved += expiry.resolve_implied(database, grace_ms=grace_ms, run_id=run_id, actor=actor)
    return summary


def _start(
    connection: Connection, *, day: str, run_id: str, source: str, actor: str, now_us: int, lease_ms: int
) -> list[Abandoned]:
    abandoned = days.take(connection, day, run_id, now_us=now_us, actor=actor, lease_ms=lease_ms)
    repository.insert_run(connection, run_id, day=day, source=source, now_us=now_us)
    return abandoned


def _chunks(leading: list[Staged | Malformed], items: Iterator[Staged | Malformed]) -> Iterator[chunks.Chunk]:
    """The report in chunks: the leading lines, then twice as many lines as the chunk before, up
    to CHUNK_LINES_MAX: a transaction per chunk, and its fixed cost spread over more lines as
    the report proves long. Each is read whole before its transaction (a retry replays it)."""
    size = len(leading)
    chunk = chunks.Chunk()
    for entry in leading:
        chunk.add(entry)
    while chunk.lines:
        yield chunk
        size = min(max(size, CHUNK_LINES) * 2, CHUNK_LINES_MAX)
        chunk = chunks.Chunk()
        for entry in itertools.islice(items, size):
            chunk.add(entry)


def _chunk(
    connection: Connection, *, chunk: chunks.Chunk, context: Context, lease_ms: int, isolation: faults.Isolation
) -> Counts:
    """One chunk's transaction; a line whose proof cannot be applied to its object is a break
    (`item_not_moved`) and the chunk goes on (`lifecycle.faults`: the chunk runs again with each
    such line in a savepoint)."""
    days.renew(connection, context.day, context.run_id, now_us=context.now_us, lease_ms=lease_ms)
    return chunks.reconcile_chunk(connection, chunk, context, isolation)


def _close(
    database: Database,
    counts: Counts,
    sha256: str,
    context: Context,
    *,
    grace_ms: int,
    started_us: int,
    lease_ms: int,
) -> Summary:
    """The missing lines, then in one transaction the superseded breaks, the run's counts and
    its completion (see `closing`). Every transaction renews the lease first."""
    day, run_id = context.day, context.run_id
    database.transaction(repository.analyze_staging)
    previous = database.transaction(partial(repository.latest_completed_run, day=closing.previous_day(day)))
    span = closing.window(day, grace_ms=grace_ms, started_us=started_us, previous_run_id=previous, run_id=run_id)
    for kind in _KINDS:
        after: tuple[str, str] | None = None
        while True:
            page = partial(closing.missing_page, kind=kind, after=after, span=span, context=context)
            stored, after = database.transaction(partial(_renewed, work=page, context=context, lease_ms=lease_ms))
            counts.breaks["missing_at_processor"] += stored
            if after is None:
                break
    summary = Summary(run_id, day, counts.lines, counts.matched, +counts.breaks, counts.resolved)
    summary.fees_booked, summary.fees_minor = counts.fees_booked, counts.fees_minor
    values = {
        "lines_read": counts.lines,
        "matched": counts.matched,
        "breaks_found": sum(summary.breaks.values()),
        "resolved": counts.resolved,
        "report_sha256": sha256,
    }
    finish = partial(_finish, context=context, values=values)
    summary.superseded = database.transaction(partial(_renewed, work=finish, context=context, lease_ms=lease_ms))
    return summary


def _renewed(connection: Connection, *, work: Callable[[Connection], T], context: Context, lease_ms: int) -> T:
    """`work` in a transaction of the run, after renewing its lease (LeaseLost: nothing written)."""
    days.renew(connection, context.day, context.run_id, now_us=clock.now_us(), lease_ms=lease_ms)
    return work(connection)


def _finish(connection: Connection, *, context: Context, values: dict[str, Any]) -> int:
    """Complete the run: supersede the day's open breaks it did not meet, store its counts, forget
    the lines the day's other runs read, release the day. One transaction: a run is completed
    with all of this, or (killed before) with none of it. Returns the breaks superseded."""
    day, run_id, now_us = context.day, context.run_id, clock.now_us()
    superseded = closing.supersede_unmet(connection, day, run_id, actor=context.actor, now_us=now_us)
    repository.finish_run(connection, run_id, {**values, "finished_at_us": now_us})
    repository.forget_seen_of_day(connection, day, keep_run_id=run_id)
    released = days.release(connection, day, run_id)
    assert released, (day, run_id)  # renewed in this transaction
    return superseded


def _give_up(database: Database, *, day: str, run_id: str, actor: str) -> None:
    """The run stopped before completing: abandon it now and release its day, if it still holds
    it (one that lost its lease was abandoned by the run that took the day). If even this fails
    (the database is gone), the lease lapses and the next run or worker does it."""

    def work(connection: Connection) -> None:
        if days.release(connection, day, run_id):
            days.abandon(connection, run_id, day, actor=actor, now_us=clock.now_us())

    try:
        database.transaction(work)
    except Exception as error:  # the run's own error, raised on, is what the caller must see
        log.warning(
            "reconciliation run %s stopped and could not be marked abandoned (%s): its lease will lapse",
            run_id,
            type(error).__name__,
            extra={"event": "reconciliation_run_not_abandoned", "run_id": run_id, "day": day},
        )


def abandon_lapsed(database: Database, *, now_us: int, actor: str) -> list[Abandoned]:
    """Mark `abandoned` every run still `running` whose lease on its day lapsed (at most
    LAPSED_RUNS_MAX a call), rolling back its breaks: what a worker does when it looks, and
    `paycore reconcile` once it has run. A day a live run holds is left to that run."""
    with database.read() as connection:
        lapsed = repository.lapsed_runs(connection, now_us=now_us, limit=LAPSED_RUNS_MAX)
    abandoned: list[Abandoned] = []
    for day in sorted({day for _, day in lapsed}):
        try:
            abandoned += database.transaction(partial(_sweep, day=day, now_us=now_us, actor=actor))
        except DayBusy:
            continue  # a live run took the day since: it abandoned them itself
    return abandoned


def _sweep(connection: Connection, *, day: str, now_us: int, actor: str) -> list[Abandoned]:
    holder = ids.new_id("rcn")  # holds the day for this transaction only
    abandoned = days.take(connection, day, holder, now_us=now_us, actor=actor)
    days.release(connection, day, holder)
    return abandoned


def _hashed(lines: Iterable[str], digest: Any) -> Iterator[str]:
    for text in lines:
        digest.update(encoded(text))
        yield text


# --- the HTTP API: resolving a break; its reads are queries.py -------------------


def resolve_break(
    connection: Connection,
    tenant_id: str,
    break_id: str,
    *,
    resolution: str,
    note: str | None,
    actor: str,
    now_us: int,
) -> Break:
    """open -> resolved, with the resolution, the note, who and when; audited. A break that is
    not open is BreakNotOpen (409), whoever resolved or superseded it."""
    if resolution not in states.RESOLUTIONS:
        raise UnknownResolution(f"resolution must be one of {', '.join(states.RESOLUTIONS)}", param="resolution")
    if note is not None and not 0 < len(note) <= states.NOTE_CHARS_MAX:
        raise InvalidRequest(f"note must be 1 to {states.NOTE_CHARS_MAX} characters", param="note")
    current = queries.get_break(connection, tenant_id, break_id)
    values = {"resolution": resolution, "note": note, "resolved_by": actor, "resolved_at_us": now_us}
    return states.move(
        connection, current, states.RESOLVED, cause=resolution, actor=actor, now_us=now_us, values=values
    )


# --- Manual resolutions (ADR 0016): the breaks that leave an item to a person, and the ones
# that show a person's outcome was wrong --------------------------------------------------------

CONTRADICTED: Final = "manual_resolution_contradicted"
_BREAKS_NAMING_MAX: Final = 100


def open_breaks_naming(connection: Connection, tenant_id: str, object_id: str) -> list[Break]:
    """The open breaks that name the item, oldest first."""
    return breaks_naming(connection, tenant_id, object_id, open_only=True)


def breaks_naming(connection: Connection, tenant_id: str, object_id: str, *, open_only: bool = False) -> list[Break]:
    """The breaks that name the item (every status, or open ones), oldest first."""
    rows = repository.breaks_naming(connection, tenant_id, object_id, open_only=open_only, limit=_BREAKS_NAMING_MAX)
    return [break_from_row(row._mapping) for row in rows]


def record_contradiction(
    connection: Connection,
    tenant_id: str,
    kind: Kind,
    item: Any,
    *,
    status: str,
    reported: str,
    evidence: dict[str, Any],
    source_id: str,
    actor: str,
    now_us: int,
) -> bool:
    """When the processor's final word `reported` (a webhook's) contradicts what a person
    confirmed by hand for `item` (a payment, refund or payout, in `status`, public name), open
    a `manual_resolution_contradicted` break under the webhook's id (`source_id`) with the
    webhook as its evidence; nothing moves. True when one was stored (a second webhook the same
    day finds it stored)."""
    if not matching.contradicts(kind, status, reported):
        return False
    if not audit.resolved_by_cause(connection, [(tenant_id, item.id)], MANUAL_CAUSE):
        return False
    detail = f"a person resolved it by hand as {status}; the processor now says {reported}"
    context = Context(source_id, clock.utc_day(now_us).isoformat(), actor, now_us, -1)
    key = f"{CONTRADICTED}:{kind}:{item.id}"
    known = Known(kind, item.id, status, item.amount_minor, item.currency)
    return chunks.store(connection, context, tenant_id, key, Finding(CONTRADICTED, detail), None, known, evidence) == 1


# --- The scheduled job (reconciliation/rounds.py): the closed days still to reconcile -------


def due_days(connection: Connection, *, now_us: int, delay_ms: int, lookback_days: int) -> list[str]:
    """The UTC days, oldest first, among the `lookback_days` before today's, that ended at
    least `delay_ms` before `now_us` and have no completed run from the processor's report."""
    assert now_us > 0 and delay_ms >= 0 and lookback_days >= 0
    today_start_us = now_us - now_us % clock.DAY_US
    closed = []
    for back in range(lookback_days, 0, -1):
        start_us = today_start_us - back * clock.DAY_US
        if start_us + clock.DAY_US + delay_ms * 1_000 <= now_us:
            closed.append(clock.utc_day(start_us).isoformat())
    done = repository.days_completed(connection, source="processor", days=closed)
    due = [day for day in closed if day not in done]
    assert due == sorted(due) and len(due) <= lookback_days
    return due
