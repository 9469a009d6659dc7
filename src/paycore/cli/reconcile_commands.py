"""`paycore reconcile --report FILE` or `paycore reconcile --day YYYY-MM-DD`: reconcile a day's
settlement report (docs/reconciliation.md), from a file (or `-`, standard input) or fetched
from the processor at PAYCORE_PROCESSOR_URL.

The report is read as it comes, with a progress bar on standard error
and a summary at the end. A report is UTF-8 text (a byte-order mark and CRLF line ends are
fine); a file is checked whole before anything is written. Exit 0 when it ran: breaks are
findings, not errors. Exit 1 with one line when the file cannot be read or is not a
settlement report (in another encoding: the line that is not UTF-8; nothing is written then)
or when another run (a worker, another CLI) is reconciling the same day, 2 for a bad option.

Runs whose lease lapsed (killed half-way), of its day as it takes it and of other days once it
has run, are marked abandoned and their breaks rolled back; the summary names them.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit import actors, clock
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ProcessorError
from paycore.reconciliation import report as settlement_report
from paycore.reconciliation import rounds as reconciliation_rounds
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.errors import DayBusy, NotAReport

errors = Console(stderr=True)


def reconcile(
    report: str | None = typer.Option(None, "--report", help="The settlement report (CSV), or - for standard input."),
    day: str | None = typer.Option(
        None, "--day", help="The day, YYYY-MM-DD (UTC). Without --report: fetch its report from the processor."
    ),
) -> None:
    """Match the processor's settlement report against payments, refunds and payouts."""
    if report is None and day is None:
        errors.print("[red]give --report FILE (or -), or --day YYYY-MM-DD to fetch that day's report[/red]")
        raise typer.Exit(2)
    if day is not None:
        try:
            day = dt.date.fromisoformat(day).isoformat()
        except ValueError:
            errors.print(f"[red]--day: {day!r} is not a day (YYYY-MM-DD)[/red]")
            raise typer.Exit(2) from None
    settings = Settings.from_env()
    database = Database(settings)
    try:
        if not migrate.is_usable(database):
            errors.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
            raise typer.Exit(1)
        name = report or f"the processor's report of {day}"
        try:
            summary = _reconciled(database, settings, report, day)
        except OSError as error:
            errors.print(f"[red]cannot read {name}: {error.strerror or error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
        except ProcessorError as error:
            errors.print(f"[red]cannot fetch {name}: {error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
        except NotAReport as error:
            errors.print(f"[red]{name} is not a settlement report: {error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
        except DayBusy as error:
            errors.print(f"[red]{error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
    finally:
        database.dispose()
    _print_summary(summary)


def _reconciled(database: Database, settings: Settings, report: str | None, day: str | None) -> reconciliation.Summary:
    grace_ms, lease_ms = settings.reconcile_grace_ms, settings.reconcile_lease_ms
    # The processor is asked for a dispute a line names that paycore does not know, from a file too.
    processor = HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)
    if report is None:  # fetched from the processor, as the worker's scheduled job does
        assert day is not None
        with _progress() as advance:
            summary = reconciliation_rounds.reconcile_from_processor(
                database, processor, day, progress=advance, grace_ms=grace_ms, lease_ms=lease_ms
            )
    else:
        with _opened(report) as stream, _progress() as advance:  # a file is checked whole as it opens
            summary = reconciliation.reconcile(
                database,
                stream,
                source="file",
                day=day,
                progress=advance,
                grace_ms=grace_ms,
                lease_ms=lease_ms,
                processor=processor,
            )
    # The run abandoned its own day's dead runs as it took the day; then those of other days, as
    # a worker's look does (a deployment may run no worker). Never for a report refused.
    summary.abandoned += reconciliation.abandon_lapsed(database, now_us=clock.now_us(), actor=actors.LOCAL)
    return summary


@contextmanager
def _opened(report: str) -> Iterator[Iterable[str]]:
    """The report's text lines, read as every report is (`report.opened`: UTF-8, its line ends
    kept; a file, or standard input redirected from one, checked whole first)."""
    if report == "-":
        text = settlement_report.opened(sys.stdin.buffer)
        try:
            yield text
        finally:
            text.detach()  # standard input stays open for whoever owns it
        return
    with open(report, "rb") as raw:
        yield settlement_report.opened(raw)


@contextmanager
def _progress() -> Iterator[reconciliation.Progress]:
    columns = (SpinnerColumn(), TextColumn("reconciling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=errors, transient=True) as progress:
        task = progress.add_task("lines", total=None)
        yield lambda lines: progress.advance(task, lines)


def _print_summary(summary: reconciliation.Summary) -> None:
    for found in summary.abandoned:
        print(
            f"abandoned run {found.run_id} of {found.day} (its lease lapsed): "
            f"{found.rolled_back} of its breaks rolled back"
        )
    breaks = ", ".join(f"{kind} {count}" for kind, count in sorted(summary.breaks.items())) or "none"
    print(f"run {summary.run_id} for {summary.day}")
    print(f"lines read {summary.lines_read}, matched {summary.matched}, resolved {summary.resolved}")
    print(f"new breaks: {breaks}")
    fees = ", ".join(f"{amount} {currency}" for currency, amount in sorted(summary.fees_minor.items())) or "none"
    print(f"fees booked: {summary.fees_booked} ({fees} in minor units)")
    if summary.disputes_recorded:
        print(f"disputes recorded from the processor's answers about its lines: {summary.disputes_recorded}")
    if summary.superseded:
        print(f"superseded: {summary.superseded} open breaks this corrected report no longer has")
