"""The overview's charts: what `reports.activity` read for the last 24 hours and the last 30
days, drawn with the console's one chart geometry (`reports.charts`) and labelled for people
(money in major units with its thousands grouped, a rate in percent to one decimal, both by
integer arithmetic). Each chart carries its data as a table too (`_charts.html`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from paycore.kit.money import CURRENCY_EXPONENTS, format_grouped
from paycore.reports import activity as reading
from paycore.reports.activity import HOUR_US, Activity, Window
from paycore.reports.charts import Chart, Plot, Series, mirrored, stacked, x_labels

STATUS_COLOURS: Final = {  # bottom-up in a stack: the outcomes first
    "succeeded": "#12b76a",
    "failed": "#d92d20",
    "canceled": "#98a2b3",
    "requires_capture": "#7a5af8",
    "processing": "#2e90fa",
    "in_doubt": "#f79009",
}
KIND_COLOURS: Final = {"payment": "#f79009", "refund": "#7a5af8", "payout": "#0e9384"}
IN_COLOUR: Final = "#12b76a"
OUT_COLOUR: Final = "#d92d20"
BREAK_COLOUR: Final = "#d92d20"
RATE_COLOUR: Final = "#2e90fa"
LABEL_STEPS: Final = {"hours": 6, "days": 7}  # an x label every so many buckets
WINDOW_TITLES: Final = {"hours": "last 24 hours", "days": "last 30 days"}


def count(value: int) -> str:
    return f"{value:,}"


def per_mille(value: int) -> str:
    """975 -> 97.5%: integer arithmetic, no float."""
    assert 0 <= value <= reading.PER_MILLE, value
    return f"{value // 10}.{value % 10}%"


def money_of(currency: str) -> Callable[[int], str]:
    def label(amount_minor: int) -> str:
        if currency not in CURRENCY_EXPONENTS:
            return f"{amount_minor:,} {currency} (minor units)"
        return f"{format_grouped(amount_minor, currency)} {currency}"

    return label


def rows(found: tuple[Activity, ...]) -> list[tuple[Chart, Chart]]:
    """The overview's charts in pairs, the last 24 hours' beside the last 30 days' (whose
    currencies both windows draw: the 24 hours lie within the 30 days)."""
    assert [one.window.name for one in found] == ["hours", "days"], found
    short, long = found
    currencies = sorted({*long.money_in, *long.money_out})
    assert {*short.money_in, *short.money_out} <= set(currencies), (short, currencies)
    return list(zip(charts(short, currencies), charts(long, currencies), strict=True))


def charts(found: Activity, currencies: list[str]) -> list[Chart]:
    """One window's charts, in the order the overview shows them: a money chart per currency."""
    window = found.window
    buckets = [reading.bucket_label(window, start) for start in window.starts_us()]
    made = [_statuses(found, buckets), _rate(found, buckets)]
    made += [_money(found, buckets, currency) for currency in currencies] or [_no_money(found, buckets)]
    made += [_in_doubt(found, buckets), _breaks(found, buckets)]
    return made


def _chart(
    window: Window,
    buckets: list[str],
    key: str,
    title: str,
    description: str,
    plot: Plot,
    table: list[tuple[str, list[str]]],
    legend: list[Series] | None = None,
) -> Chart:
    """A chart of `window` with its legend and table; `table`: (column, a cell per bucket)."""
    short = [bucket[11:] if window.bucket_us == HOUR_US else bucket[5:] for bucket in buckets]
    full_title = f"{title}, {WINDOW_TITLES[window.name]}"
    rows = [[bucket, *(cells[index] for _, cells in table)] for index, bucket in enumerate(buckets)]
    unit = "hour (UTC)" if window.bucket_us == HOUR_US else "day (UTC)"
    return Chart(
        key=f"chart-{window.name}-{key}",
        title=full_title,
        description=description,
        plot=plot,
        labels=x_labels(short, LABEL_STEPS[window.name]),
        legend=[(one.name, one.colour) for one in legend or []],
        table_head=[unit, *(column for column, _ in table)],
        table_rows=list(reversed(rows)),  # the newest first
    )


def _statuses(found: Activity, buckets: list[str]) -> Chart:
    series = [
        Series(status, colour, found.by_status[status])
        for status, colour in STATUS_COLOURS.items()
        if any(found.by_status.get(status, ()))
    ]
    total = sum(sum(values) for values in found.by_status.values())
    drawn = series or [Series("payments", STATUS_COLOURS["succeeded"], [0] * len(buckets))]
    plot = stacked(drawn, buckets, count)
    description = f"Payments created per bucket, stacked by their status now; {total:,} in all."
    table = [(one.name, [count(value or 0) for value in one.values]) for one in series]
    return _chart(found.window, buckets, "status", "Payments by status", description, plot, table, series)


def _rate(found: Activity, buckets: list[str]) -> Chart:
    rates = found.success_per_mille
    plot = stacked([Series("success rate", RATE_COLOUR, rates)], buckets, per_mille, top=reading.PER_MILLE)
    description = "Succeeded payments out of those succeeded or failed, per bucket; no bar: none decided."
    cells = ["—" if rate is None else per_mille(rate) for rate in rates]
    return _chart(found.window, buckets, "rate", "Success rate", description, plot, [("success rate", cells)])


def _money(found: Activity, buckets: list[str], currency: str) -> Chart:
    zeros = [0] * len(buckets)
    values_in = found.money_in.get(currency, zeros)
    values_out = found.money_out.get(currency, zeros)
    label = money_of(currency)
    money_in, money_out = Series("in", IN_COLOUR, values_in), Series("out", OUT_COLOUR, values_out)
    plot = mirrored(money_in, money_out, buckets, label)
    description = (
        f"{currency}: money in (succeeded payments) above the line, money out (succeeded refunds, payouts"
        f" sent) below; in {label(sum(values_in))}, out {label(sum(values_out))}."
    )
    table = [(f"in ({currency})", [label(value) for value in values_in])]
    table.append((f"out ({currency})", [label(value) for value in values_out]))
    title = f"Money in and out, {currency}"
    return _chart(found.window, buckets, f"money-{currency}", title, description, plot, table, [money_in, money_out])


def _no_money(found: Activity, buckets: list[str]) -> Chart:
    zeros = [0] * len(buckets)
    plot = mirrored(Series("in", IN_COLOUR, zeros), Series("out", OUT_COLOUR, zeros), buckets, count)
    description = "No money moved in or out in the window."
    return _chart(found.window, buckets, "money", "Money in and out", description, plot, [])


def _in_doubt(found: Activity, buckets: list[str]) -> Chart:
    series = [Series(kind, KIND_COLOURS[kind], found.in_doubt[kind]) for kind in reading.KINDS]
    plot = stacked(series, buckets, count)
    now = sum(values[-1] for values in found.in_doubt.values())
    description = f"Payments, refunds and payouts in doubt at each bucket's end, stacked by kind; {now:,} now."
    table = [(one.name, [count(value or 0) for value in one.values]) for one in series]
    return _chart(found.window, buckets, "in-doubt", "In doubt", description, plot, table, series)


def _breaks(found: Activity, buckets: list[str]) -> Chart:
    series = Series("open breaks", BREAK_COLOUR, found.open_breaks)
    plot = stacked([series], buckets, count)
    description = f"Reconciliation breaks open at each bucket's end; {found.open_breaks[-1]:,} now."
    table = [("open breaks", [count(value) for value in found.open_breaks])]
    return _chart(found.window, buckets, "breaks", "Open breaks", description, plot, table)
