"""The console's one chart geometry (`reports.charts`) and the overview's charts drawn as SVG
(`http/console/activity.py`, `_charts.html`): fixed bucket slots, stacks exactly their totals'
height, integer coordinates only (a float anywhere fails here), labels in major units with
thousands separators, and a title, a description and a table for every chart."""

from __future__ import annotations

import itertools
import re

import pytest

from paycore.http.console import activity as overview_charts
from paycore.http.console.render import _ENVIRONMENT
from paycore.kit.clock import parse_rfc3339
from paycore.reports.activity import HOUR_US, Activity, _bucketed, _Hourly, windows
from paycore.reports.charts import (
    PLOT_HEIGHT,
    PLOT_WIDTH,
    TICK_GAP,
    Bar,
    Series,
    mirrored,
    nice_ceiling,
    slot_of,
    stacked,
)

NOW = parse_rfc3339("2026-12-07T00:30:00Z")
# Every attribute an SVG coordinate or size is written in; `viewBox` is four of them.
NUMERIC = re.compile(r'\b(x|y|x1|x2|y1|y2|width|height|rx)="([^"]*)"')
VIEW_BOX = re.compile(r'viewBox="([^"]*)"')
TRANSLATE = re.compile(r"translate\(([^)]*)\)")


def non_integers(svg: str) -> list[str]:
    """Every numeric attribute of `svg` that is not a whole number (a '.', an 'e', anything)."""
    found = [f"{name}={value}" for name, value in NUMERIC.findall(svg) if not re.fullmatch(r"-?[0-9]+(%)?", value)]
    for box in VIEW_BOX.findall(svg) + TRANSLATE.findall(svg):
        found += [f"viewBox/translate {box}" for part in re.split(r"[ ,]+", box) if not re.fullmatch(r"-?[0-9]+", part)]
    return found


def sample() -> tuple[Activity, Activity]:
    short, long = windows(NOW)
    hour = (parse_rfc3339("2026-12-06T23:15:00Z") - long.start_us) // HOUR_US
    hourly = _Hourly(
        payments={(hour, "succeeded"): 7, (hour, "failed"): 2, (hour + 1, "in_doubt"): 1, (hour - 30, "succeeded"): 1},
        money_in={(hour, "USD"): 123_456_789, (hour, "JPY"): 1_250},
        money_out={(hour + 1, "USD"): 99_999},
        changes={(hour, "payment"): 1},
    )
    levels = {"payment": 1, "refund": 0, "payout": 0, "break": 2}
    return _bucketed(hourly, short, long, levels), _bucketed(hourly, long, long, levels)


def rendered() -> str:
    template = _ENVIRONMENT.from_string(
        '{% from "_charts.html" import bars_chart %}'
        "{% for a, b in rows %}{{ bars_chart(a) }}{{ bars_chart(b) }}{% endfor %}"
    )
    return template.render(rows=overview_charts.rows(sample()))


@pytest.mark.parametrize(
    ("value", "nice"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (10, 10), (11, 20), (1_234, 2_000)]
)
def test_an_axis_top_is_one_two_or_five_times_a_power_of_ten(value: int, nice: int) -> None:
    assert nice_ceiling(value) == nice


def test_buckets_have_fixed_slots_so_one_day_of_data_is_one_narrow_bar() -> None:
    values: list[int] = [0] * 29 + [5]
    plot = stacked([Series("succeeded", "#000", values)], [f"day {n}" for n in range(30)], str)
    pitch, width = slot_of(30)
    assert (pitch, width) == (16, 13)
    (bar,) = plot.bars
    assert bar.width == width and bar.x == 29 * pitch + (pitch - width) // 2 and bar.x + bar.width <= PLOT_WIDTH
    assert bar.height == PLOT_HEIGHT and bar.y == 0  # 5 is the (nice) top: the whole height
    assert bar.tip == "day 29: succeeded 5"


def test_a_stack_is_as_high_as_its_total_and_its_parts_touch() -> None:
    series = [Series("a", "#111", [3, 1]), Series("b", "#222", [4, 0]), Series("c", "#333", [0, 9])]
    plot = stacked(series, ["one", "two"], str)
    first = [bar for bar in plot.bars if bar.tip.startswith("one")]
    assert [bar.tip for bar in first] == ["one: a 3", "one: b 4"]
    assert first[0].y == first[1].y + first[1].height  # b sits on a
    assert sum(bar.height for bar in first) == PLOT_HEIGHT * 7 // 10  # 7 of a top of 10
    assert [(tick.y, tick.label) for tick in plot.ticks] == [(0, "10"), (PLOT_HEIGHT // 2, "5"), (PLOT_HEIGHT, "0")]


def test_a_tick_is_where_its_value_is_and_labels_never_overprint() -> None:
    five = stacked([Series("a", "#111", [3])], ["one"], str)
    assert [tick.label for tick in five.ticks] == ["5", "0"]  # no tick at 2 half way up a top of 5
    lopsided = mirrored(Series("in", "#0a0", [5_000]), Series("out", "#a00", [150]), ["one"], str)
    assert [tick.label for tick in lopsided.ticks] == ["5000", "0"]  # 200 would overprint 0
    assert all(abs(a.y - b.y) >= TICK_GAP for a, b in itertools.pairwise(lopsided.ticks))
    assert len(lopsided.bars) == 2 and lopsided.bars[1].height >= 1  # the small side still drawn


def test_a_value_too_small_for_a_pixel_still_shows() -> None:
    plot = stacked([Series("a", "#111", [1, 1_000_000])], ["one", "two"], str)
    assert plot.bars[0].height == 1


def test_mirrored_bars_go_up_for_in_and_down_for_out_on_one_scale() -> None:
    plot = mirrored(Series("in", "#0a0", [100, 0]), Series("out", "#a00", [0, 100]), ["one", "two"], str)
    up, down = plot.bars
    assert plot.zero_y == PLOT_HEIGHT // 2 and up.y + up.height == plot.zero_y and down.y == plot.zero_y
    assert up.height == down.height == PLOT_HEIGHT // 2
    empty = mirrored(Series("in", "#0a0", [0]), Series("out", "#a00", [0]), ["one"], str)
    assert empty.bars == [] and empty.zero_y == PLOT_HEIGHT


def test_a_float_is_refused_where_a_coordinate_is_made() -> None:
    with pytest.raises(AssertionError):
        Bar(1.5, 0, 1, 1, "#000", "")  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        stacked([Series("a", "#111", [1.5])], ["one"], str)  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        nice_ceiling(2.5)  # type: ignore[arg-type]


def test_the_overview_svg_has_integer_coordinates_only() -> None:
    svg = rendered()
    assert svg.count('<svg class="chart"') == 12  # six charts (two currencies) for each window
    assert len(NUMERIC.findall(svg)) > 100
    assert non_integers(svg) == []


def test_the_check_catches_a_float() -> None:
    """The scan above can fail: a coordinate written as a float is found."""
    assert non_integers('<rect x="1.5" y="2" width="3" height="1e3"/>') == ["x=1.5", "height=1e3"]
    assert non_integers('<svg viewBox="0 0 610.0 150">') != []


def test_money_is_labelled_in_major_units_with_thousands_separators() -> None:
    svg = rendered()
    assert "1,234,567.89 USD" in svg  # the bar's title, the table and the description
    assert "1,250 JPY" in svg  # no minor unit in the yen
    assert "999.99 USD" in svg
    assert "77.7%" in svg  # 7 of 9 decided: 777 per mille, by integers


def test_every_chart_has_a_title_a_description_and_a_table() -> None:
    svg = rendered()
    charts = svg.count('<svg class="chart"')
    assert svg.count("<title id=") == svg.count("<desc id=") == charts
    assert svg.count('aria-labelledby="chart-') == charts
    assert svg.count("<summary>Data as a table</summary>") == charts
    for key in (
        "chart-hours-status",
        "chart-days-rate",
        "chart-days-money-USD",
        "chart-hours-in-doubt",
        "chart-days-breaks",
    ):
        assert f'id="{key}"' in svg, key
