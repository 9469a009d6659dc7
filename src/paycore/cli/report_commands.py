"""`paycore report ...`: read-only reports for operators (docs/losses.md).

`paycore report losses` streams the loss report page by page (keyset pagination on loss,
payout id, tenant id) inside ONE read transaction, so the pages and the totals come from one
snapshot and memory holds one page at most. Without --tenant it covers every tenant.
Amounts are integers of minor units in CSV and JSON; the table formats them with integer
arithmetic (`format_minor`). Progress goes to stderr when there is more than one page.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import typer
from rich.console import Console
from rich.progress import Progress
from sqlalchemy import Connection

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.errors import DomainError
from paycore.kit.money import format_minor
from paycore.reports import losses as loss_report
from paycore.reports.dispute_losses import DisputeTotal
from paycore.reports.losses import CurrencyTotal, LossFilters, LossReport, LossRow
from paycore.reports.schemas import dispute_totals_json, loss_row_json, totals_json
from paycore.tenants.service import check_tenant_id

app = typer.Typer(help="Read-only reports.", no_args_is_help=True)
errors = Console(stderr=True)

COLUMNS = tuple(LossRow.__dataclass_fields__)
_AMOUNT_COLUMNS = tuple(column for column in COLUMNS if column.endswith("_minor"))
_TEXT_WIDTHS = {"payout_id": 30, "tenant_id": 12, "rail": 4, "currency": 8, "status": 9}


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def losses(
    from_day: str | None = typer.Option(None, "--from", help="First day, YYYY-MM-DD (UTC), inclusive."),
    to_day: str | None = typer.Option(None, "--to", help="Last day, YYYY-MM-DD (UTC), inclusive."),
    rail: str | None = typer.Option(None, "--rail", help="ach or sepa."),
    currency: str | None = typer.Option(None, "--currency", help="ISO 4217 code, e.g. USD."),
    tenant: str | None = typer.Option(None, "--tenant", help="One tenant; every tenant when absent."),
    output_format: Format = typer.Option(Format.table, "--format", help="table, csv or json."),
    output: Path | None = typer.Option(None, "--output", help="Write to this file instead of stdout."),
    page_rows: int = typer.Option(
        5_000,
        "--page-rows",
        min=1,
        max=loss_report.EXPORT_PAGE_ROWS_MAX,
        help="Rows per page (each page is one query).",
    ),
) -> None:
    """Payouts by loss over [--from, --to], highest first, with totals per currency."""
    try:
        tenant_id = None if tenant is None else check_tenant_id(tenant, param="--tenant")
        filters = loss_report.parse_filters(tenant_id, from_day=from_day, to_day=to_day, rail=rail, currency=currency)
    except DomainError as error:
        errors.print(f"[red]{error.param}: {error.message}[/red]" if error.param else f"[red]{error.message}[/red]")
        raise typer.Exit(2) from error
    database = Database(Settings.from_env())
    try:
        if not migrate.is_usable(database):
            errors.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
            raise typer.Exit(1)
        with _opened(output) as stream, database.read() as connection:
            _export(connection, filters, output_format, stream, page_rows)
    finally:
        database.dispose()


@contextmanager
def _opened(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        return
    with output.open("w", encoding="utf-8", newline="") as stream:
        yield stream


def _export(
    connection: Connection, filters: LossFilters, output_format: Format, stream: IO[str], page_rows: int
) -> None:
    loss_report.begin_report(connection)
    first = loss_report.report(connection, filters, after=None, limit=page_rows)
    totals = first.totals
    expected_rows = sum(total.payouts for total in totals)
    writer = _WRITERS[output_format](stream, filters, first)
    written: dict[str, int] = {}
    count = 0
    for rows in _pages(connection, filters, first, page_rows, expected_rows):
        writer.rows(rows)
        count += len(rows)
        for row in rows:
            written[row.currency] = written.get(row.currency, 0) + row.loss_minor
    writer.end()
    # Pair check: the pages, streamed, are exactly the totals (one snapshot: they must be).
    assert count == expected_rows, (count, expected_rows)
    assert written == {total.currency: total.loss_minor for total in totals}, (written, totals)
    if output_format is Format.csv:
        errors.print(_totals_text(totals, count))
        errors.print(_disputes_text(first.dispute_totals))


def _pages(
    connection: Connection, filters: LossFilters, first: LossReport, page_rows: int, expected_rows: int
) -> Iterator[list[LossRow]]:
    """Every row, a page at a time from `first` on; at most pages_max queries (the totals
    bound the set), each page's totals the first's (one snapshot)."""
    pages_max = expected_rows // page_rows + 1
    page = first
    with Progress(console=errors, transient=True, disable=expected_rows <= page_rows) as progress:
        task = progress.add_task("loss report", total=expected_rows)
        for _ in range(pages_max):
            assert page.totals == first.totals, (page.totals, first.totals)
            assert page.dispute_totals == first.dispute_totals, (page.dispute_totals, first.dispute_totals)
            progress.advance(task, len(page.rows))
            yield page.rows
            if not page.has_more:
                return
            page = loss_report.report(connection, filters, after=page.rows[-1].cursor, limit=page_rows)
    raise AssertionError(f"more than {pages_max} pages for {expected_rows} rows")


def _days(filters: LossFilters) -> str:
    if filters.from_day is None and filters.to_day is None:
        return "all time"
    return f"{filters.from_day or 'the first day'} to {filters.to_day or 'the last day'} (UTC)"


def _totals_text(totals: list[CurrencyTotal], count: int) -> str:
    parts = [f"{total.currency} {format_minor(total.loss_minor, total.currency)}" for total in totals]
    return f"{count} payouts; loss " + (", ".join(parts) if parts else "none")


def _disputes_text(totals: list[DisputeTotal]) -> str:
    """The chargebacks on payments (docs/losses.md, "Disputes on payments"), per currency."""
    if not totals:
        return "disputes on payments: no loss"
    parts = [
        f"{t.currency} {format_minor(t.loss_minor, t.currency)} (fees {format_minor(t.dispute_fees_minor, t.currency)},"
        f" lost {format_minor(t.lost_chargebacks_minor, t.currency)}, {t.disputes} disputes)"
        for t in totals
    ]
    return "disputes on payments: loss " + ", ".join(parts)


class _TableWriter:
    def __init__(self, stream: IO[str], filters: LossFilters, first: LossReport) -> None:
        self.stream, self.totals, self.count = stream, first.totals, 0
        self.dispute_totals = first.dispute_totals
        stream.write(f"Payout losses, {_days(filters)}, highest first\n")
        stream.write(self._line({column: column.removesuffix("_minor") for column in COLUMNS}) + "\n")

    @staticmethod
    def _line(cells: dict[str, str]) -> str:
        parts = []
        for column in COLUMNS:
            if column in _AMOUNT_COLUMNS:
                parts.append(cells[column].rjust(max(12, len(column) - 6)))
            else:
                parts.append(cells[column].ljust(_TEXT_WIDTHS[column]))
        return "  ".join(parts).rstrip()

    def rows(self, rows: list[LossRow]) -> None:
        for row in rows:
            values = asdict(row)
            cells = {c: format_minor(values[c], row.currency) if c in _AMOUNT_COLUMNS else values[c] for c in COLUMNS}
            self.stream.write(self._line(cells) + "\n")
        self.count += len(rows)

    def end(self) -> None:
        self.stream.write(_totals_text(self.totals, self.count) + "\n")
        for total in self.totals:
            loss = format_minor(total.loss_minor, total.currency)
            self.stream.write(f"  {total.currency}: {loss} over {total.payouts} payouts\n")
        self.stream.write(_disputes_text(self.dispute_totals) + "\n")


class _CsvWriter:
    def __init__(self, stream: IO[str], filters: LossFilters, first: LossReport) -> None:
        del filters, first  # CSV carries the rows only; the totals go to stderr
        self.writer = csv.writer(stream, lineterminator="\n")
        self.writer.writerow(COLUMNS)

    def rows(self, rows: list[LossRow]) -> None:
        self.writer.writerows([getattr(row, column) for column in COLUMNS] for row in rows)

    def end(self) -> None:
        pass


class _JsonWriter:
    """The API's list shape, written as it streams: totals first, then the rows."""

    def __init__(self, stream: IO[str], filters: LossFilters, first: LossReport) -> None:
        self.stream, self.first = stream, True
        head: dict[str, Any] = {"object": "list", "from": filters.from_day, "to": filters.to_day}
        head |= {"tenant_id": filters.tenant_id, "totals": totals_json(first.totals)}
        head |= {"dispute_totals": dispute_totals_json(first.dispute_totals), "has_more": False}
        stream.write(json.dumps(head)[:-1] + ', "data": [')

    def rows(self, rows: list[LossRow]) -> None:
        for row in rows:
            self.stream.write(("\n" if self.first else ",\n") + json.dumps(loss_row_json(row)))
            self.first = False

    def end(self) -> None:
        self.stream.write("\n]}\n")


_WRITERS: dict[Format, type[_TableWriter] | type[_CsvWriter] | type[_JsonWriter]] = {
    Format.table: _TableWriter,
    Format.csv: _CsvWriter,
    Format.json: _JsonWriter,
}
