"""Time as integer microseconds since the Unix epoch, rendered as RFC 3339 UTC."""

from __future__ import annotations

import datetime as dt
import time
from typing import Final

DAY_US: Final = 86_400_000_000  # a UTC day in Unix time (which has no leap seconds)


def now_us() -> int:
    return time.time_ns() // 1_000


def to_rfc3339(timestamp_us: int) -> str:
    seconds, micros = divmod(timestamp_us, 1_000_000)
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.UTC).replace(microsecond=micros)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_rfc3339(text: str) -> int:
    """Parse an RFC 3339 timestamp with an explicit offset into epoch microseconds."""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("timestamp needs a UTC offset (e.g. 'Z')")
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def utc_day(timestamp_us: int) -> dt.date:
    """The UTC calendar day of an epoch-microseconds time."""
    return dt.datetime.fromtimestamp(timestamp_us // 1_000_000, tz=dt.UTC).date()


def day_start_us(day: dt.date) -> int:
    """The first microsecond of a UTC calendar day (the inverse of `utc_day` at its start)."""
    return (day - dt.date(1970, 1, 1)).days * DAY_US
