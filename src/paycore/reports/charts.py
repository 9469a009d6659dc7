"""The console's charts: the one home of their geometry (below, "drawing": fixed bucket slots,
stacked and mirrored bars, axis ticks, integer coordinates only), which the overview's charts
(`reports/activity.py` reads their data) and the loss report's draw with; and the loss
report's data (the console's `/ops/losses`): the adjustments of the report's range and filters
summed by day and currency, each component apart, in one statement (the definition of a loss
and its components: `reports/losses.py`, docs/losses.md)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, text

from paycore.reports.losses import COLUMNS, COMPONENT_SUMS, FIRST_DAY, LAST_DAY, TENANT_MATCH, LossFilters, exact_int

# The console's charts: the adjustments of the report's range and filters, summed
# by day (`effective_on`) and currency with each component apart: ONE statement, the same
# text on SQLite and PostgreSQL. `shown_days` keeps the latest :day_limit days that have an
# adjustment (a chart has room for so many bars); the `total` lines, one per currency, cover
# every day of the range whatever was cut. A payout's loss summed over the range's days is its
# loss in the report, so the totals' losses are the report's totals (a payout that nets to 0
# adds 0 here, and is absent there).
_BY_DAY_SQL: Final = """\
WITH
by_day AS (
    SELECT
        a.effective_on AS effective_on,
        p.currency AS currency,
        {component_sums}
    FROM payout_adjustments AS a
    JOIN payouts AS p ON p.tenant_id = a.tenant_id AND p.id = a.payout_id
    WHERE a.effective_on >= :from_day
        AND a.effective_on <= :to_day{match}
        AND (p.rail = :rail OR :rail IS NULL)
        AND (p.currency = :currency OR :currency IS NULL)
    GROUP BY a.effective_on, p.currency
),
shown_days AS (
    SELECT DISTINCT d.effective_on FROM by_day AS d ORDER BY d.effective_on DESC LIMIT :day_limit
)
SELECT 'day' AS line, b.effective_on AS effective_on, b.currency AS currency, b.fees_minor,
    b.return_fees_minor, b.chargebacks_minor, b.return_shortfall_minor, b.fee_reversals_minor,
    b.chargeback_reversals_minor, b.recoveries_minor, b.refunds_minor
FROM by_day AS b
JOIN shown_days AS s ON s.effective_on = b.effective_on
UNION ALL
SELECT 'total', NULL, b.currency, SUM(b.fees_minor), SUM(b.return_fees_minor), SUM(b.chargebacks_minor),
    SUM(b.return_shortfall_minor), SUM(b.fee_reversals_minor), SUM(b.chargeback_reversals_minor),
    SUM(b.recoveries_minor), SUM(b.refunds_minor)
FROM by_day AS b
GROUP BY b.currency
ORDER BY line, effective_on, currency"""
_SUMS: Final = textwrap.indent(COMPONENT_SUMS, " " * 8).lstrip()  # the report's components
_BY_DAY_STATEMENTS: Final = {
    True: text(_BY_DAY_SQL.format(match=TENANT_MATCH, component_sums=_SUMS)),
    False: text(_BY_DAY_SQL.format(match="", component_sums=_SUMS)),
}
COMPONENTS: Final = COLUMNS[6:14]  # fees_minor .. refunds_minor, in the definition's order
ADDED: Final = COMPONENTS[:4]  # fees, return fees, chargebacks, return shortfall
SUBTRACTED: Final = COMPONENTS[4:]  # fee reversals, chargeback reversals, recoveries, refunds
CHART_DAYS_MAX: Final = 1_000


@dataclass(frozen=True)
class DayLoss:
    """One day's loss in one currency, by component (`effective_on` None: every day's)."""

    effective_on: str | None
    currency: str
    fees_minor: int
    return_fees_minor: int
    chargebacks_minor: int
    return_shortfall_minor: int
    fee_reversals_minor: int
    chargeback_reversals_minor: int
    recoveries_minor: int
    refunds_minor: int

    @property
    def loss_minor(self) -> int:
        added = self.fees_minor + self.return_fees_minor + self.chargebacks_minor + self.return_shortfall_minor
        taken = self.fee_reversals_minor + self.chargeback_reversals_minor + self.recoveries_minor + self.refunds_minor
        return added - taken


@dataclass(frozen=True)
class LossesByDay:
    days: list[DayLoss]  # by day, then currency: the latest `days_max` days with an adjustment
    totals: list[DayLoss]  # one per currency, over every day of the range
    cut: bool  # older days of the range were left out of `days`


def by_day_and_component(connection: Connection, filters: LossFilters, *, days_max: int) -> LossesByDay:
    """The report's range and filters, summed by day and currency, each component apart (one
    statement); the days with an adjustment only."""
    assert 1 <= days_max <= CHART_DAYS_MAX, days_max
    parameters = {
        "tenant_id": filters.tenant_id,
        "from_day": filters.from_day or FIRST_DAY,
        "to_day": filters.to_day or LAST_DAY,
        "rail": filters.rail,
        "currency": filters.currency,
        "day_limit": days_max + 1,  # one more to know whether days were cut
    }
    days: list[DayLoss] = []
    totals: list[DayLoss] = []
    for found in connection.execute(_BY_DAY_STATEMENTS[filters.tenant_id is not None], parameters):
        values = {name: exact_int(getattr(found, name)) for name in COMPONENTS}
        loss = DayLoss(found.effective_on, found.currency, **values)
        assert loss.return_shortfall_minor >= 0, loss
        (days if found.line == "day" else totals).append(loss)
    shown = sorted({str(loss.effective_on) for loss in days})
    cut = len(shown) > days_max
    if cut:
        days = [loss for loss in days if loss.effective_on != shown[0]]
    return LossesByDay(days=days, totals=sorted(totals, key=lambda total: total.currency), cut=cut)


# ---------------------------------------------------------------------------- drawing
#
# The geometry every chart of the console draws with (`http/console/templates/_charts.html` turns
# it into SVG): bars in fixed slots, one per bucket whatever holds data, so one day of data is
# one narrow bar, never one as wide as the chart. Integer arithmetic only: every coordinate
# is `value * pixels // scale`; a float is a programmer's error (`_pixels` and `Bar` assert it).

PLOT_WIDTH: Final = 480  # the plot's SVG user units; the axis labels sit left of it
PLOT_HEIGHT: Final = 120
BUCKETS_MAX: Final = 366
NICE_STEPS: Final = (1, 2, 5)
TICK_GAP: Final = 13  # the least distance between two labelled grid lines (a label's height)


@dataclass(frozen=True)
class Bar:
    x: int
    y: int
    width: int
    height: int
    fill: str
    tip: str  # the bar's <title>: its bucket, series and value, for a pointer and a screen reader

    def __post_init__(self) -> None:
        assert all(type(value) is int for value in (self.x, self.y, self.width, self.height)), self


@dataclass(frozen=True)
class Tick:
    """A horizontal grid line at `y` and its value's label."""

    y: int
    label: str


@dataclass(frozen=True)
class XLabel:
    x: int  # the middle of its bucket's slot
    text: str


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    values: list[int] | list[int | None]  # one per bucket; None: no value (no bar)


@dataclass(frozen=True)
class Plot:
    bars: list[Bar]
    ticks: list[Tick]
    zero_y: int


@dataclass(frozen=True)
class Chart:
    """One chart as `_charts.html`'s `bars_chart` draws it: the plot, the x axis's labels, the
    legend, and the same data as a table (the fallback for a screen reader or a copy)."""

    key: str  # the element id, unique on the page
    title: str
    description: str
    plot: Plot
    labels: list[XLabel]
    legend: list[tuple[str, str]]  # (name, colour)
    table_head: list[str]
    table_rows: list[list[str]]
    width: int = PLOT_WIDTH
    height: int = PLOT_HEIGHT


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (at least 1): an axis's
    top that reads well (1,234 -> 2,000)."""
    assert type(value) is int and value >= 0, value
    power = 1
    while True:
        for step in NICE_STEPS:
            if step * power >= value:
                return step * power
        power *= 10


def slot_of(buckets: int, width: int = PLOT_WIDTH) -> tuple[int, int]:
    """(pitch, bar width) of `buckets` fixed slots across `width`: a gap of a fifth between bars."""
    assert 1 <= buckets <= BUCKETS_MAX, buckets
    pitch = width // buckets
    return pitch, max(1, pitch - max(1, pitch // 5))


def _pixels(value: int, pixels: int, scale: int) -> int:
    assert type(value) is int and type(pixels) is int and type(scale) is int and scale > 0, (value, pixels, scale)
    return value * pixels // scale


def x_labels(labels: list[str], step: int, width: int = PLOT_WIDTH) -> list[XLabel]:
    """Every `step`-th bucket's label, counted back from the last (the current bucket is named)."""
    pitch, _ = slot_of(len(labels), width)
    return [
        XLabel(index * pitch + pitch // 2, label)
        for index, label in enumerate(labels)
        if (len(labels) - 1 - index) % step == 0
    ]


def stacked(series: list[Series], buckets: list[str], label: Callable[[int], str], *, top: int | None = None) -> Plot:
    """Bars stacked bottom-up in series order, each bucket in its fixed slot. Each segment runs
    between its cumulative sums' pixels, so a stack's height is its total's exactly. `top`: the
    axis's top (a rate's 1000); otherwise the largest total, made nice. Ticks: 0, half, top."""
    assert series and all(len(one.values) == len(buckets) for one in series), (series, buckets)
    totals = [sum(one.values[index] or 0 for one in series) for index in range(len(buckets))]
    scale = top if top is not None else nice_ceiling(max(totals))
    assert scale > 0 and max(totals) <= scale, (scale, totals)
    pitch, width = slot_of(len(buckets))
    bars: list[Bar] = []
    for index, bucket in enumerate(buckets):
        below = 0
        for one in series:
            value = one.values[index]
            if not value:
                continue
            low = PLOT_HEIGHT - _pixels(below, PLOT_HEIGHT, scale)
            below += value
            high = PLOT_HEIGHT - _pixels(below, PLOT_HEIGHT, scale)
            height = max(1, low - high)  # a value too small for a pixel still shows
            tip = f"{bucket}: {one.name} {label(value)}"
            bars.append(Bar(index * pitch + (pitch - width) // 2, low - height, width, height, one.colour, tip))
    # Half way only where the half is whole (a top of 5 has no tick at 2).
    parts = (0, 2, 1) if scale % 2 == 0 else (0, 2)
    ticks = [Tick(PLOT_HEIGHT - _pixels(part, PLOT_HEIGHT, 2), label(scale * part // 2)) for part in parts]
    return Plot(bars, spaced(ticks), PLOT_HEIGHT)


def mirrored(up: Series, down: Series, buckets: list[str], label: Callable[[int], str]) -> Plot:
    """`up` above a zero line and `down` below it, on one scale (each side's top made nice).
    Ticks: the top, 0 and the bottom (as a magnitude)."""
    assert len(up.values) == len(down.values) == len(buckets), (up, down)
    top = nice_ceiling(max(value or 0 for value in up.values)) if any(up.values) else 0
    bottom = nice_ceiling(max(value or 0 for value in down.values)) if any(down.values) else 0
    scale = (top + bottom) or 1
    zero_y = _pixels(top, PLOT_HEIGHT, scale) if top + bottom else PLOT_HEIGHT
    pitch, width = slot_of(len(buckets))
    bars: list[Bar] = []
    for index, bucket in enumerate(buckets):
        for one, above in ((up, True), (down, False)):
            value = one.values[index] or 0
            if value <= 0:
                continue
            height = max(1, _pixels(value, PLOT_HEIGHT, scale))
            x = index * pitch + (pitch - width) // 2
            tip = f"{bucket}: {one.name} {label(value)}"
            bars.append(Bar(x, zero_y - height if above else zero_y, width, height, one.colour, tip))
    ticks = [Tick(zero_y, label(0)), Tick(0, label(top))] if top else [Tick(zero_y, label(0))]
    if bottom:
        ticks.append(Tick(PLOT_HEIGHT, label(bottom)))
    return Plot(bars, spaced(ticks), zero_y)


def spaced(ticks: list[Tick]) -> list[Tick]:
    """The ticks in order of importance, less any closer than TICK_GAP to one kept before it
    (its label would overprint): a small side of a mirrored chart keeps its bars, not its label."""
    kept: list[Tick] = []
    for tick in ticks:
        if all(abs(tick.y - other.y) >= TICK_GAP for other in kept):
            kept.append(tick)
    return sorted(kept, key=lambda tick: tick.y)
