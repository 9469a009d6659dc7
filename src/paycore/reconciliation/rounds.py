"""The processor's own report of a day, reconciled (ADR 0014, docs/reconciliation.md, "The
scheduled job").

`reconcile_from_processor` fetches a day's settlement report from the processor and reconciles
it as it arrives: what `paycore reconcile --day` does, and what the worker does for each due day.

`reconcile_due` is the worker's part. First it marks `abandoned` the runs whose lease lapsed
(`service.abandon_lapsed`: a run killed half-way, of any day), rolling back their breaks. Then
the closed UTC days, oldest first, among the last PAYCORE_RECONCILE_LOOKBACK_DAYS, that are
PAYCORE_RECONCILE_DELAY_MS past their end and have no completed run from the processor's report
(`service.due_days`), at most `DAYS_PER_RUN_MAX` of them per call. A day another run holds
(`DayBusy`) is skipped; a processor that does not answer ends the call, and the days wait for
the next one. Nothing here raises for either: a worker must outlive its processor. A run that
dies half-way leaves no completed run, so its day stays due and is reconciled again whole.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Final, Literal

from paycore.db.engine import Database
from paycore.processor.port import Processor, ProcessorError
from paycore.reconciliation import days, service
from paycore.reconciliation.errors import DayBusy, NotAReport

DAYS_PER_RUN_MAX: Final = 1  # a day's report can be a million lines: one day, then the other jobs

log = logging.getLogger(__name__)

Outcome = Literal["reconciled", "skipped", "processor_down"]


@dataclass(frozen=True)
class Done:
    reconciled: int  # days reconciled by this call
    more: bool  # days still due after them: the caller may look again at once


def reconcile_from_processor(
    database: Database,
    processor: Processor,
    day: str,
    *,
    progress: service.Progress | None = None,
    grace_ms: int = service.GRACE_MS_DEFAULT,
    lease_ms: int = days.DAY_LEASE_MS,
) -> service.Summary:
    """Fetch `day`'s settlement report (YYYY-MM-DD, UTC) from the processor and reconcile it.
    Raises what the processor's call raises (`ProcessorError`) and what `service.reconcile` does
    (`DayBusy`, `NotAReport`)."""
    lines = processor.settlement_report(day)
    try:
        return service.reconcile(
            database,
            lines,
            source="processor",
            day=day,
            progress=progress,
            grace_ms=grace_ms,
            lease_ms=lease_ms,
            processor=processor,
        )
    finally:
        if isinstance(lines, Generator):  # a report refused half-way: its connection closes now
            lines.close()


@dataclass(frozen=True)
class Schedule:
    """When a day is due and how it is reconciled (PAYCORE_RECONCILE_*)."""

    delay_ms: int
    lookback_days: int
    grace_ms: int
    lease_ms: int = days.DAY_LEASE_MS


def reconcile_due(database: Database, processor: Processor, schedule: Schedule, *, now_us: int, actor: str) -> Done:
    """Abandon the runs whose lease lapsed, then reconcile at most `DAYS_PER_RUN_MAX` of the
    days due at `now_us`, oldest first. `actor`: the worker, who abandons them."""
    for found in service.abandon_lapsed(database, now_us=now_us, actor=actor):
        log.warning(
            "reconciliation run %s of %s was abandoned: its lease lapsed; %d of its breaks rolled back",
            found.run_id,
            found.day,
            found.rolled_back,
            extra={
                "event": "reconciliation_run_abandoned",
                "run_id": found.run_id,
                "day": found.day,
                "rolled_back": found.rolled_back,
            },
        )
    with database.read() as connection:
        days = service.due_days(
            connection, now_us=now_us, delay_ms=schedule.delay_ms, lookback_days=schedule.lookback_days
        )
    reconciled = 0
    for index, day in enumerate(days):  # at most lookback_days
        outcome = _reconcile_day(database, processor, day, schedule)
        if outcome == "processor_down":
            return Done(reconciled, more=False)
        reconciled += outcome == "reconciled"
        if reconciled == DAYS_PER_RUN_MAX:
            return Done(reconciled, more=index + 1 < len(days))
    return Done(reconciled, more=False)


def _reconcile_day(database: Database, processor: Processor, day: str, schedule: Schedule) -> Outcome:
    try:
        summary = reconcile_from_processor(
            database, processor, day, grace_ms=schedule.grace_ms, lease_ms=schedule.lease_ms
        )
    except DayBusy as busy:
        log.info(
            "reconciliation of %s skipped: another run holds the day",
            day,
            extra={"event": "reconciliation_day_busy", "day": day, "holder": busy.holder},
        )
        return "skipped"
    except ProcessorError as error:
        # The error's type only: its message may quote whatever the processor sent back.
        log.warning(
            "no settlement report of %s from the processor (%s); tried again later",
            day,
            type(error).__name__,
            extra={"event": "reconciliation_report_unavailable", "day": day, "error_type": type(error).__name__},
        )
        return "processor_down"
    except NotAReport as error:
        log.error(
            "the processor's report of %s is not a settlement report (%s); tried again later",
            day,
            error,
            extra={"event": "reconciliation_report_refused", "day": day, "error_type": type(error).__name__},
        )
        return "skipped"
    breaks = dict(sorted(summary.breaks.items()))
    log.info(
        "reconciled %s from the processor's report: %d lines, %d matched, %d resolved, new breaks %s",
        day,
        summary.lines_read,
        summary.matched,
        summary.resolved,
        ", ".join(f"{kind} {count}" for kind, count in breaks.items()) or "none",
        extra={
            "event": "reconciliation_day_reconciled",
            "day": day,
            "run_id": summary.run_id,
            "lines_read": summary.lines_read,
            "matched": summary.matched,
            "resolved": summary.resolved,
            "breaks_found": sum(breaks.values()),
            "breaks": breaks,
            "fees_booked": summary.fees_booked,
            "superseded": summary.superseded,
        },
    )
    return "reconciled"
