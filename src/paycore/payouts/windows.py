"""Return windows (SPEC §11): how long a settled payout can still come back, by rail and code.

Banking days here are Monday to Friday in UTC; bank holidays are not modeled (docs/payouts.md
says so). The windows are the rules' outer bounds, not a prediction of when returns come.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

# ACH (Nacha rules): most returns within 2 banking days of settlement; returns a consumer
# claims as unauthorized within 60 calendar days.
ACH_WINDOW_BANKING_DAYS: Final = 2
ACH_UNAUTHORIZED_CODES: Final = frozenset({"R05", "R07", "R10", "R11", "R51"})
ACH_UNAUTHORIZED_WINDOW_DAYS: Final = 60
# SEPA credit transfers: a return within 3 banking days; a recall answered positively
# (FOCR) may come back later: 10 banking days to ask plus 15 to answer.
SEPA_WINDOW_BANKING_DAYS: Final = 3
SEPA_RECALL_CODES: Final = frozenset({"FOCR"})
SEPA_RECALL_WINDOW_BANKING_DAYS: Final = 25
# Until this closes, a settled payout is still returnable with some code.
_DAY_US: Final = 86_400_000_000


def closes_at_us(rail: str, code: str | None, settled_at_us: int) -> int:
    """The first microsecond at which a return with `code` is too late (end of the last day)."""
    settled_day = dt.datetime.fromtimestamp(settled_at_us // 1_000_000, tz=dt.UTC).date()
    if rail == "ach" and code in ACH_UNAUTHORIZED_CODES:
        last_day = settled_day + dt.timedelta(days=ACH_UNAUTHORIZED_WINDOW_DAYS)
    elif rail == "ach":
        last_day = banking_days_after(settled_day, ACH_WINDOW_BANKING_DAYS)
    elif code in SEPA_RECALL_CODES:
        last_day = banking_days_after(settled_day, SEPA_RECALL_WINDOW_BANKING_DAYS)
    else:
        last_day = banking_days_after(settled_day, SEPA_WINDOW_BANKING_DAYS)
    return _day_start_us(last_day) + _DAY_US


def returnable_until_us(rail: str, settled_at_us: int) -> int:
    """When no return code at all is in time any more."""
    longest = "R10" if rail == "ach" else "FOCR"
    return closes_at_us(rail, longest, settled_at_us)


def banking_days_after(day: dt.date, count: int) -> dt.date:
    assert count >= 0
    while count > 0:
        day += dt.timedelta(days=1)
        if day.weekday() < 5:
            count -= 1
    return day


def _day_start_us(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 1_000_000
