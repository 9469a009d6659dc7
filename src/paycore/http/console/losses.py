"""The console's loss report: `/ops/losses` with its charts (server-rendered SVG, by
day and by component) and `/ops/losses.csv`. Money is an integer everywhere here: the charts'
geometry is integer arithmetic (pixels = amount * height // scale), the CSV carries minor units
and the decimal text of `kit.money.format_minor`; nothing is a float."""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from paycore.db.engine import Database
from paycore.http.console import forms, render, scope
from paycore.http.console.scope import BadFilter
from paycore.http.console.session import principal
from paycore.http.routing import JsonRoute
from paycore.kit.errors import DomainError
from paycore.kit.money import CURRENCY_EXPONENTS, format_minor
from paycore.operators.types import Principal
from paycore.reports import charts as loss_charts
from paycore.reports import losses
from paycore.reports.charts import DayLoss, slot_of
from paycore.reports.losses import Cursor, LossFilters, LossRow

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(principal)]
CSV_PAGE_ROWS: Final = 10_000  # rows per run of the report's statement while the CSV streams
CSV_COLUMNS: Final = (*LossRow.__dataclass_fields__, "loss")  # loss: loss_minor as decimal text
CHART_DAYS: Final = 366  # bars of the loss-by-day chart: the range's latest days with an adjustment
CHART_SLOTS_MIN: Final = 31  # a day's slot is at most a month's share of the width: one day is one narrow bar
CHART_WIDTH: Final = 900  # the plot's pixels (SVG user units)
CHART_HEIGHT: Final = 160
PARTS_WIDTH: Final = 600  # the component chart's longest bar
PARTS_ROW: Final = 22
COMPONENT_LABELS: Final = {
    "fees_minor": "fees",
    "return_fees_minor": "return fees",
    "chargebacks_minor": "chargebacks",
    "return_shortfall_minor": "return shortfall",
    "fee_reversals_minor": "fee reversals",
    "chargeback_reversals_minor": "chargeback reversals",
    "recoveries_minor": "recoveries",
    "refunds_minor": "refunds",
}


@dataclass(frozen=True)
class _LossQuery:
    filters: LossFilters
    after: Cursor | None
    given: dict[str, str]


LOSS_FILTERS: Final = ("from", "to", "rail", "currency", "tenant")


def _loss_query(request: Request, who: Principal) -> _LossQuery:
    given = forms.given(request, LOSS_FILTERS)
    tenant_id = scope.tenant_of(who, given["tenant"])
    filters = losses.parse_filters(
        tenant_id,
        from_day=given["from"] or None,
        to_day=given["to"] or None,
        rail=given["rail"] or None,
        currency=given["currency"] or None,
    )
    after = forms.cursor(request, who, tenant_id)
    if after is not None:
        losses.check_starting_after(after[1])
    return _LossQuery(filters, None if after is None else Cursor(*after), given)


def _losses_context(given: dict[str, str]) -> dict[str, Any]:
    return {
        "rows": [],
        "totals": [],
        "dispute_totals": [],
        "charts": [],
        "cut": False,
        "more": None,
        "given": given,
        "rails": losses.RAILS,
        "currencies": sorted(CURRENCY_EXPONENTS),
        "labels": COMPONENT_LABELS,
        "size": {"width": CHART_WIDTH, "height": CHART_HEIGHT, "parts": PARTS_WIDTH, "row": PARTS_ROW},
        "chart_days": CHART_DAYS,
    }


@router.get("/losses")
def losses_page(request: Request, who: Who) -> Response:
    """Payouts by loss over the range, highest first, with the totals per currency and two
    charts per currency: the loss by day, and by component."""
    context = _losses_context(forms.given(request, LOSS_FILTERS))
    try:
        query = _loss_query(request, who)
        with request.app.state.database.read() as connection:
            losses.begin_report(connection)  # the page, its totals and its charts: one snapshot
            found = losses.report(connection, query.filters, after=query.after, limit=scope.PAGE_ROWS)
            by_day = loss_charts.by_day_and_component(connection, query.filters, days_max=CHART_DAYS)
    except (BadFilter, DomainError) as error:
        return forms.refused(request, "losses.html", error, **context)
    charts = [
        {"currency": total.currency, "days": day_chart(by_day.days, total.currency), "parts": parts_chart(total)}
        for total in by_day.totals
    ]
    more = found.rows[-1] if found.has_more else None
    context |= {"rows": found.rows, "totals": found.totals, "charts": charts, "cut": by_day.cut, "more": more}
    context["dispute_totals"] = found.dispute_totals
    return render.page(request, "losses.html", **context)


def day_chart(days: list[DayLoss], currency: str) -> dict[str, Any]:
    """Bars of one currency's loss by day on a time axis: up from the zero line for a loss,
    down for a gain (a recovery booked after its loss). Each day has a fixed slot (the console's
    one geometry, `reports.charts.slot_of`), the latest day at the right: a few days of data are
    a few narrow bars, never one as wide as the chart. Integer geometry only."""
    shown = [day for day in days if day.currency == currency and day.effective_on is not None]
    if not shown:
        return {"bars": [], "zero_y": CHART_HEIGHT, "top": 0, "bottom": 0, "first": "", "last": ""}
    ordinals = [dt.date.fromisoformat(str(day.effective_on)).toordinal() for day in shown]
    span_days = ordinals[-1] - ordinals[0] + 1
    top = max(0, *(day.loss_minor for day in shown))
    bottom = max(0, *(-day.loss_minor for day in shown))
    scale = (top + bottom) or 1
    zero_y = CHART_HEIGHT * top // scale
    slots = max(span_days, CHART_SLOTS_MIN)
    pitch, width = slot_of(slots, CHART_WIDTH)
    bars: list[dict[str, Any]] = []
    for day, ordinal in zip(shown, ordinals, strict=True):
        pixels = abs(day.loss_minor) * CHART_HEIGHT // scale
        if day.loss_minor != 0 and pixels == 0:
            pixels = 1  # a loss too small for a pixel still shows
        x = (slots - span_days + ordinal - ordinals[0]) * pitch + (pitch - width) // 2
        y = zero_y - pixels if day.loss_minor > 0 else zero_y
        bars.append({"x": x, "y": y, "width": width, "height": pixels, "day": day.effective_on, "loss": day.loss_minor})
    first, last = shown[0].effective_on, shown[-1].effective_on
    first_x, last_x = int(bars[0]["x"]), int(bars[-1]["x"]) + width
    axis = {"first_x": first_x, "last_x": last_x}
    return {"bars": bars, "zero_y": zero_y, "top": top, "bottom": -bottom, "first": first, "last": last, **axis}


def parts_chart(total: DayLoss) -> dict[str, Any]:
    """One horizontal bar per component of the loss over the range: the four that add to it,
    then the four that take from it. Integer geometry only."""
    values = {name: getattr(total, name) for name in COMPONENT_LABELS}
    biggest = max(values.values()) or 1
    bars = []
    for row, (name, value) in enumerate(values.items()):
        pixels = value * PARTS_WIDTH // biggest
        bars.append(
            {
                "y": row * PARTS_ROW,
                "width": max(1, pixels) if value else 0,
                "label": COMPONENT_LABELS[name],
                "value": value,
                "minus": name in loss_charts.SUBTRACTED,
            }
        )
    return {"bars": bars, "height": len(bars) * PARTS_ROW, "loss": total.loss_minor}


@router.get("/losses.csv")
def losses_csv(request: Request, who: Who) -> Response:
    """The whole filtered report as CSV (the page's cursor is not one of its filters): amounts
    in integer minor units, and the loss as decimal text; streamed a page of the report at a
    time, all pages in one read transaction."""
    try:
        query = _loss_query(request, who)
    except (BadFilter, DomainError) as error:
        return forms.refused(request, "losses.html", error, **_losses_context(forms.given(request, LOSS_FILTERS)))
    name = f"losses-{query.filters.from_day or 'start'}-to-{query.filters.to_day or 'end'}.csv"
    headers = {
        "Content-Disposition": f'attachment; filename="{name}"',
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }
    lines = _csv_pages(request.app.state.database, query.filters)
    return StreamingResponse(lines, media_type="text/csv; charset=utf-8", headers=headers)


def _csv_pages(database: Database, filters: LossFilters) -> Iterator[str]:
    """The header, then one chunk per page of the report; at most `payouts // page + 1`
    statements (the totals bound the set), each page's totals the first's (one snapshot)."""
    with database.read() as connection:
        losses.begin_report(connection)
        page = losses.report(connection, filters, after=None, limit=CSV_PAGE_ROWS)
        expected = sum(total.payouts for total in page.totals)
        yield _csv_text([CSV_COLUMNS])
        written = 0
        for _ in range(expected // CSV_PAGE_ROWS + 1):
            written += len(page.rows)
            yield _csv_text(
                [getattr(row, column) for column in CSV_COLUMNS[:-1]] + [_decimal(row)] for row in page.rows
            )
            if not page.has_more:
                assert written == expected, (written, expected)
                return
            totals = page.totals
            page = losses.report(connection, filters, after=page.rows[-1].cursor, limit=CSV_PAGE_ROWS)
            assert page.totals == totals, (page.totals, totals)
    raise AssertionError(f"more than {expected // CSV_PAGE_ROWS + 1} pages for {expected} rows")


def _decimal(row: LossRow) -> str:
    return format_minor(row.loss_minor, row.currency)


def _csv_text(rows: Any) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows(rows)
    return buffer.getvalue()
