"""The overview charts' buckets (`reports.activity`): fixed windows of whole UTC hours and days,
hours summed into them across midnight, the levels counted back from now, the success rate in
integer per mille; and the partial index's WHERE clause, the same text in its three places."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from paycore.audit.models import LEVEL_EVENTS, events
from paycore.kit.clock import DAY_US, parse_rfc3339
from paycore.reports import activity
from paycore.reports.activity import BREAK, HOUR_US, KINDS, _bucketed, _Hourly, bucket_label, windows

MIGRATION = Path(activity.__file__).parents[1] / "db/migrations/versions/0040_overview_charts.py"
NOW = parse_rfc3339("2026-12-07T00:30:00Z")  # half an hour into a new UTC day (and month: no)
LEVELS_NOW = {"payment": 2, "refund": 0, "payout": 1, BREAK: 3}


def hour_of(moment: str, start_us: int) -> int:
    """The hour index `reports.activity` reads a row's time as (0: the long window's first)."""
    return (parse_rfc3339(moment) - start_us) // HOUR_US


def both(hourly: _Hourly, levels: dict[str, int] | None = None) -> tuple[activity.Activity, activity.Activity]:
    short, long = windows(NOW)
    return _bucketed(hourly, short, long, levels or LEVELS_NOW), _bucketed(hourly, long, long, levels or LEVELS_NOW)


def test_the_windows_are_whole_hours_and_days_ending_with_now() -> None:
    short, long = windows(NOW)
    assert (short.buckets, short.bucket_us, long.buckets, long.bucket_us) == (24, HOUR_US, 30, DAY_US)
    assert short.start_us == parse_rfc3339("2026-12-06T01:00:00Z")  # 23 whole hours, then the current one
    assert short.end_us == parse_rfc3339("2026-12-07T01:00:00Z")
    assert long.start_us == parse_rfc3339("2026-11-08T00:00:00Z")  # 29 whole days, then today
    assert long.end_us == parse_rfc3339("2026-12-08T00:00:00Z")
    assert bucket_label(short, short.starts_us()[-1]) == "2026-12-07 00:00"
    assert bucket_label(long, long.starts_us()[-1]) == "2026-12-07"
    assert windows(NOW - 1)[1].start_us == windows(NOW)[1].start_us  # the same day: the same window
    assert windows(parse_rfc3339("2026-12-06T23:59:59.999999Z"))[1].start_us == long.start_us - DAY_US


def test_rows_either_side_of_midnight_fall_in_their_own_day_and_hour() -> None:
    _, long = windows(NOW)
    before = hour_of("2026-12-06T23:59:59.999999Z", long.start_us)
    after = hour_of("2026-12-07T00:00:00Z", long.start_us)
    assert after == before + 1
    hourly = _Hourly(
        payments={(before, "succeeded"): 3, (after, "succeeded"): 2, (after, "failed"): 1},
        money_in={(before, "USD"): 30_000, (after, "USD"): 12_345},
        money_out={(after, "EUR"): 500},
        changes={},
    )
    hours, days = both(hourly)
    assert hours.by_status["succeeded"][-2:] == [3, 2] and sum(hours.by_status["succeeded"]) == 5
    assert days.by_status["succeeded"][-2:] == [3, 2] and sum(days.by_status["succeeded"]) == 5
    assert days.money_in == {"USD": [0] * 28 + [30_000, 12_345]}
    assert hours.money_out == {"EUR": [0] * 23 + [500]}
    assert days.success_per_mille[-2:] == [1000, 666]  # 2 of 3: rounded down, an integer
    assert days.success_per_mille[:-2] == [None] * 28  # nothing decided: no rate, not 0
    assert all(type(rate) is int for rate in days.success_per_mille if rate is not None)


def test_an_hour_before_the_short_window_counts_only_in_the_days() -> None:
    short, long = windows(NOW)
    early = hour_of("2026-12-06T00:59:59Z", long.start_us)  # yesterday, before the 24 hours began
    assert early == (short.start_us - long.start_us) // HOUR_US - 1
    hours, days = both(_Hourly({(early, "failed"): 4}, {}, {}, {}))
    assert "failed" not in hours.by_status and len(days.by_status["failed"]) == 30
    assert days.by_status["failed"][-2] == 4 and days.success_per_mille[-2] == 0


def test_every_bucket_is_present_an_empty_one_zero() -> None:
    hours, days = both(_Hourly({}, {}, {}, {}))
    assert hours.by_status == {} and days.money_in == {} and days.money_out == {}
    assert len(hours.success_per_mille) == 24 and len(days.success_per_mille) == 30
    assert hours.open_breaks == [3] * 24 and days.in_doubt["payout"] == [1] * 30  # no change: level flat


def test_a_level_is_now_less_the_changes_after_each_bucket() -> None:
    _, long = windows(NOW)
    entered = hour_of("2026-12-06T22:10:00Z", long.start_us)  # two payments went into doubt
    left = hour_of("2026-12-07T00:05:00Z", long.start_us)  # one came out, this hour
    opened = hour_of("2026-12-01T12:00:00Z", long.start_us)
    changes = {(entered, "payment"): 2, (left, "payment"): -1, (opened, BREAK): 3}
    hours, days = both(_Hourly({}, {}, {}, changes), {**LEVELS_NOW, "payment": 1})
    assert hours.in_doubt["payment"][-4:] == [0, 2, 2, 1]  # 21:00 0, 22:00 2, 23:00 2, now 1
    assert days.in_doubt["payment"][-2:] == [2, 1]  # yesterday's end 2, now 1
    assert days.open_breaks[-7:] == [3] * 7 and days.open_breaks[-8] == 0  # opened on 2026-12-01
    assert set(days.in_doubt) == set(KINDS)


def test_a_level_never_goes_below_zero() -> None:
    """A row written without its event (by hand) could make the count-back negative: clamped."""
    _, long = windows(NOW)
    left = hour_of("2026-12-07T00:05:00Z", long.start_us)
    hours, _ = both(_Hourly({}, {}, {}, {(left, "refund"): -1}), {**LEVELS_NOW, "refund": 0})
    assert hours.in_doubt["refund"][-2:] == [1, 0]
    hours, _ = both(_Hourly({}, {}, {}, {(left, "refund"): 5}), {**LEVELS_NOW, "refund": 2})
    assert hours.in_doubt["refund"][-2:] == [0, 2]


def test_the_levels_need_every_series_now() -> None:
    with pytest.raises(AssertionError):
        activity.activity(None, tenant_id=None, now_us=NOW, levels_now={"payment": 1})  # type: ignore[arg-type]


def test_the_level_events_text_is_the_same_in_the_query_the_model_and_the_migration() -> None:
    assert activity.LEVEL_EVENTS == LEVEL_EVENTS
    (index,) = [index for index in events.indexes if index.name == "ix_events_levels"]
    assert str(index.dialect_options["sqlite"]["where"]) == LEVEL_EVENTS
    assert str(index.dialect_options["postgresql"]["where"]) == LEVEL_EVENTS
    spec = importlib.util.spec_from_file_location("migration_0040", MIGRATION)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    assert migration._LEVEL_EVENTS == LEVEL_EVENTS
    for tenant in (True, False):
        assert f"WHERE ({LEVEL_EVENTS})" in str(activity._STATEMENTS[tenant][2])
