"""What moved over time, for the console's overview charts: the last 24 hours by hour and the
last 30 days by UTC day, of one tenant or of every one.

Each window ends with the bucket holding `now` (the current hour, today) and its buckets are
fixed: 24 hours, 30 days, every one present, an empty one 0. Three statements read the 30 days
once, by hour within the 24 hours and by day before them (the windows' edges are whole hours
and days, so both windows come from the same rows):

- payments by the hour they were created in, status and currency: the count, and the money in
  (a succeeded payment's captured amount, its whole amount when captured automatically);
- money out by hour and currency: succeeded refunds by the hour they were asked for, payouts
  sent or settled by the hour they were sent (`sent_at_us`);
- the changes of two levels: payments, refunds and payouts going into `in_doubt` (+1) and out
  of it (-1) (their `state_change` events), reconciliation breaks opened (+1) and resolved or
  superseded (-1) (their `reconciliation.break_*` events). A level's history is its value now
  less the changes after each bucket's end: no sampling job, only the events already recorded.

Each statement reads a bounded range through an index (migration 0040): `created_at_us` of
payments and refunds, `sent_at_us` of payouts, and a partial index of the few events that move
a level. Everything is an integer: counts, minor units, the success rate in per mille.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, TextClause, text

from paycore.kit.clock import DAY_US
from paycore.reports.losses import exact_int

HOUR_US: Final = 3_600_000_000
HOURS: Final = 24  # the short window's buckets
DAYS: Final = 30  # the long window's buckets
KINDS: Final = ("payment", "refund", "payout")  # what can be in doubt
BREAK: Final = "break"  # the series of open reconciliation breaks
DECIDED: Final = ("succeeded", "failed")  # a success rate's denominator: payments with an outcome
PER_MILLE: Final = 1_000

_TENANT: Final = "\n        AND {alias}.tenant_id = :tenant_id"
# A tenant's payments by time too, not by its whole history: `|| ''` keeps SQLite off the primary
# key (tenant_id, id), which it would otherwise choose for the equality; the time index holds
# the tenant id (migration 0040), so the test is read from it.
_PAYMENTS_TENANT: Final = "\n        AND p.tenant_id || '' = :tenant_id"
# The hour of a row, counted from the long window's first: its own within the short window, its
# day's first before it (the days need no more, and 30 days read as 54 buckets, not 720).
# Integer division of non-negative integers (the range starts at :start_us) truncates on both
# databases.
_HOUR: Final = (
    "CASE WHEN {time} >= :hours_from_us THEN ({time} - :start_us) / :hour_us"
    " ELSE ({time} - :start_us) / :day_us * 24 END"
)
_PAYMENTS_SQL: Final = """\
SELECT h.hour, h.status, h.currency, COUNT(*) AS payments, SUM(h.in_minor) AS in_minor
FROM (
    SELECT
        {hour} AS hour,
        p.status AS status,
        p.currency AS currency,
        CASE WHEN p.status = 'succeeded' THEN COALESCE(p.amount_captured_minor, p.amount_minor) ELSE 0 END
            AS in_minor
    FROM payments AS p
    WHERE p.created_at_us >= :start_us AND p.created_at_us < :end_us{payments}
) AS h
GROUP BY h.hour, h.status, h.currency"""
_MONEY_OUT_SQL: Final = """\
SELECT m.hour, m.currency, SUM(m.amount_minor) AS out_minor
FROM (
    SELECT {refund_hour} AS hour, r.currency AS currency, r.amount_minor AS amount_minor
    FROM refunds AS r
    WHERE r.created_at_us >= :start_us AND r.created_at_us < :end_us AND r.status = 'succeeded'{refunds}
    UNION ALL
    SELECT {payout_hour}, o.currency, o.amount_minor
    FROM payouts AS o
    WHERE o.sent_at_us >= :start_us AND o.sent_at_us < :end_us AND o.status IN ('sent', 'succeeded'){payouts}
) AS m
GROUP BY m.hour, m.currency"""
# The WHERE clause of the partial index `ix_events_levels` (migration 0040, `audit.models`), word
# for word, so that both planners prove it (tests/unit/test_activity.py holds the three equal).
LEVEL_EVENTS: Final = (
    "(kind = 'state_change' AND (from_state = 'in_doubt' OR to_state = 'in_doubt'))"
    " OR type IN ('reconciliation.break_opened', 'reconciliation.break_resolved', 'reconciliation.break_superseded')"
)
_LEVELS_SQL: Final = """\
SELECT c.hour, c.series, SUM(c.delta) AS delta
FROM (
    SELECT
        {hour} AS hour,
        CASE WHEN events.kind = 'state_change' THEN events.object_type ELSE 'break' END AS series,
        CASE WHEN events.to_state = 'in_doubt' OR events.type = 'reconciliation.break_opened' THEN 1 ELSE -1 END
            AS delta
    FROM events
    WHERE ({levels})
        AND events.created_at_us >= :start_us AND events.created_at_us < :end_us{events}
) AS c
GROUP BY c.hour, c.series"""


def _statements(tenant: bool) -> tuple[TextClause, TextClause, TextClause]:
    def match(alias: str) -> str:
        return _TENANT.format(alias=alias) if tenant else ""

    def hour(time: str) -> str:
        return _HOUR.format(time=time)

    return (
        text(_PAYMENTS_SQL.format(hour=hour("p.created_at_us"), payments=_PAYMENTS_TENANT if tenant else "")),
        text(
            _MONEY_OUT_SQL.format(
                refund_hour=hour("r.created_at_us"),
                payout_hour=hour("o.sent_at_us"),
                refunds=match("r"),
                payouts=match("o"),
            )
        ),
        text(_LEVELS_SQL.format(hour=hour("events.created_at_us"), levels=LEVEL_EVENTS, events=match("events"))),
    )


_STATEMENTS: Final = {True: _statements(True), False: _statements(False)}


@dataclass(frozen=True)
class Window:
    """Fixed buckets: `buckets` of `bucket_us` from `start_us` (a whole hour or UTC day)."""

    name: str  # "hours" | "days"
    start_us: int
    bucket_us: int
    buckets: int

    def __post_init__(self) -> None:
        assert self.bucket_us in (HOUR_US, DAY_US) and self.start_us % self.bucket_us == 0, self
        assert self.buckets in (HOURS, DAYS), self

    @property
    def end_us(self) -> int:
        return self.start_us + self.bucket_us * self.buckets

    def starts_us(self) -> list[int]:
        return [self.start_us + index * self.bucket_us for index in range(self.buckets)]


def windows(now_us: int) -> tuple[Window, Window]:
    """The last 24 hours (the current hour last) and the last 30 UTC days (today last)."""
    hour = now_us - now_us % HOUR_US
    day = now_us - now_us % DAY_US
    return (
        Window("hours", hour - (HOURS - 1) * HOUR_US, HOUR_US, HOURS),
        Window("days", day - (DAYS - 1) * DAY_US, DAY_US, DAYS),
    )


@dataclass(frozen=True)
class Activity:
    """One window's series, each a list of one integer per bucket (oldest first)."""

    window: Window
    by_status: dict[str, list[int]]  # payment status -> payments created in the bucket
    success_per_mille: list[int | None]  # succeeded * 1000 // (succeeded + failed); None: none decided
    money_in: dict[str, list[int]]  # currency -> minor units
    money_out: dict[str, list[int]]  # currency -> minor units
    in_doubt: dict[str, list[int]]  # kind -> items in doubt at the bucket's end (now, for the last)
    open_breaks: list[int]  # open breaks at the bucket's end (now, for the last)


@dataclass(frozen=True)
class _Hourly:
    """The 30 days' rows by hour index (0 = the long window's first hour): an hour of the short
    window by its own, an earlier one by its day's first."""

    payments: dict[tuple[int, str], int]  # (hour, status) -> count
    money_in: dict[tuple[int, str], int]  # (hour, currency) -> minor units
    money_out: dict[tuple[int, str], int]
    changes: dict[tuple[int, str], int]  # (hour, series) -> net change of the level


def activity(
    connection: Connection, *, tenant_id: str | None, now_us: int, levels_now: Mapping[str, int]
) -> tuple[Activity, Activity]:
    """Both windows (24 hours, 30 days). `levels_now`: each kind's items in doubt now and the open
    breaks now (`BREAK`), which the levels' histories are counted back from."""
    assert set(levels_now) == {*KINDS, BREAK}, levels_now
    short, long = windows(now_us)
    hourly = _read(connection, short, long, tenant_id)
    return _bucketed(hourly, short, long, levels_now), _bucketed(hourly, long, long, levels_now)


def _read(connection: Connection, short: Window, long: Window, tenant_id: str | None) -> _Hourly:
    payments, money_out, levels = _STATEMENTS[tenant_id is not None]
    parameters = {
        "start_us": long.start_us,
        "end_us": long.end_us,
        "hours_from_us": short.start_us,
        "hour_us": HOUR_US,
        "day_us": DAY_US,
        "tenant_id": tenant_id,
    }
    found = _Hourly({}, {}, {}, {})
    for row in connection.execute(payments, parameters):
        _add(found.payments, (int(row.hour), str(row.status)), exact_int(row.payments))
        _add(found.money_in, (int(row.hour), str(row.currency)), exact_int(row.in_minor))
    for row in connection.execute(money_out, parameters):
        _add(found.money_out, (int(row.hour), str(row.currency)), exact_int(row.out_minor))
    for row in connection.execute(levels, parameters):
        _add(found.changes, (int(row.hour), str(row.series)), exact_int(row.delta))
    return found


def _add(into: dict[tuple[int, str], int], key: tuple[int, str], value: int) -> None:
    assert 0 <= key[0] < DAYS * 24, key  # the statement's range bounds the hour
    into[key] = into.get(key, 0) + value


def _bucketed(hourly: _Hourly, window: Window, long: Window, levels_now: Mapping[str, int]) -> Activity:
    """The hourly rows summed into `window`'s buckets; an hour outside it is left out."""
    first_hour = (window.start_us - long.start_us) // HOUR_US
    per_bucket = window.bucket_us // HOUR_US

    def index(hour: int) -> int | None:
        bucket = (hour - first_hour) // per_bucket
        return bucket if hour >= first_hour and bucket < window.buckets else None

    def series(rows: dict[tuple[int, str], int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for (hour, name), value in rows.items():
            if (bucket := index(hour)) is not None:
                out.setdefault(name, [0] * window.buckets)[bucket] += value
        return dict(sorted(out.items()))

    by_status = series(hourly.payments)
    succeeded = by_status.get("succeeded", [0] * window.buckets)
    failed = by_status.get("failed", [0] * window.buckets)
    rates = [ok * PER_MILLE // (ok + no) if ok + no else None for ok, no in zip(succeeded, failed, strict=True)]
    levels = {
        name: _levels(hourly.changes, name, now, first_hour, per_bucket, window) for name, now in levels_now.items()
    }
    return Activity(
        window=window,
        by_status=by_status,
        success_per_mille=rates,
        money_in={currency: values for currency, values in series(hourly.money_in).items() if any(values)},
        money_out={currency: values for currency, values in series(hourly.money_out).items() if any(values)},
        in_doubt={kind: levels[kind] for kind in KINDS},
        open_breaks=levels[BREAK],
    )


def _levels(
    changes: dict[tuple[int, str], int], name: str, now: int, first_hour: int, per_bucket: int, window: Window
) -> list[int]:
    """The level at each bucket's end: now, less the changes of every later hour. Clamped at 0:
    a level is a count (events older than the window's rows never make it negative; a row
    written without its event, by hand, could)."""
    by_hour = sorted(((hour, delta) for (hour, series), delta in changes.items() if series == name), reverse=True)
    levels = [0] * window.buckets
    level, position = now, 0
    for bucket in reversed(range(window.buckets)):
        bucket_end_hour = first_hour + (bucket + 1) * per_bucket  # the first hour after the bucket
        while position < len(by_hour) and by_hour[position][0] >= bucket_end_hour:
            level -= by_hour[position][1]
            position += 1
        levels[bucket] = max(0, level)
    return levels


def bucket_label(window: Window, start_us: int) -> str:
    """`2026-12-06 14:00` for an hour, `2026-12-06` for a day (UTC)."""
    moment = dt.datetime.fromtimestamp(start_us // 1_000_000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:00" if window.bucket_us == HOUR_US else "%Y-%m-%d")
