"""`paycore reconcile --report FILE` or `paycore reconcile --day YYYY-MM-DD`: reconcile a day's
settlement report (docs/reconciliation.md), from a file (or `-`, standard input) or fetched
from the processor at PAYCORE_PROCESSOR_URL.

The report is read as it comes, with a progress bar on standard error
and a summary at the end. Exit 0 when it ran: breaks are findings, not errors. Exit 1 with
one line when the file cannot be read or is not a settlement report (nothing is written
then) or when another run (a worker, another CLI) is reconciling the same day, 2 for a bad
option.
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
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ProcessorError
from paycore.reconciliation import jobs as reconciliation_jobs
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
        except (NotAReport, UnicodeDecodeError) as error:
            errors.print(f"[red]{name} is not a settlement report: {error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
        except DayBusy as error:
            errors.print(f"[red]{error}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
    finally:
        database.dispose()
    _print_summary(summary)


def _reconciled(database: Database, settings: Settings, report: str | None, day: str | None) -> reconciliation.Summary:
    grace_ms = settings.reconcile_grace_ms
    if report is None:  # fetched from the processor, as the worker's scheduled job does
        assert day is not None
        processor = HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)
        with _progress() as advance:
            return reconciliation_jobs.reconcile_from_processor(
                database, processor, day, progress=advance, grace_ms=grace_ms
            )
    with _opened(report) as stream, _progress() as advance:
        return reconciliation.reconcile(database, stream, source="file", day=day, progress=advance, grace_ms=grace_ms)


@contextmanager
def _opened(report: str) -> Iterator[Iterable[str]]:
    if report == "-":
        yield sys.stdin
    else:
        with open(report, encoding="utf-8", newline="") as stream:
            yield stream


@contextmanager
def _progress() -> Iterator[reconciliation.Progress]:
    columns = (SpinnerColumn(), TextColumn("reconciling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=errors, transient=True) as progress:
        task = progress.add_task("lines", total=None)
        yield lambda lines: progress.advance(task, lines)


def _print_summary(summary: reconciliation.Summary) -> None:
    breaks = ", ".join(f"{kind} {count}" for kind, count in sorted(summary.breaks.items())) or "none"
    print(f"run {summary.run_id} for {summary.day}")
    print(f"lines read {summary.lines_read}, matched {summary.matched}, resolved {summary.resolved}")
    print(f"new breaks: {breaks}")
    fees = ", ".join(f"{amount} {currency}" for currency, amount in sorted(summary.fees_minor.items())) or "none"
    print(f"fees booked: {summary.fees_booked} ({fees} in minor units)")
    if summary.superseded:
        print(f"superseded: {summary.superseded} open breaks this corrected report no longer has")
