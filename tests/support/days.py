"""Tests that make payments, refunds or payouts and then read one UTC day's settlement report
(`today()`'s) expect what they made in that report. Started in a day's last seconds, a test
would make some of it before midnight and read the next day's report: not the product's fault
(an item is in the report of the day it happened, and `paycore simulate`'s midnight tests cross
midnight on purpose), but a test of something else failing once a day. `clear_of_midnight`
starts such a test after midnight instead."""

from __future__ import annotations

import time
from typing import Final

from paycore.kit import clock

MIDNIGHT_MARGIN_S: Final = 60  # longer than any such test takes on a loaded machine


def clear_of_midnight() -> None:
    """Return at once, or, in a UTC day's last MIDNIGHT_MARGIN_S seconds, just after midnight."""
    left_us = clock.DAY_US - clock.now_us() % clock.DAY_US
    if left_us <= MIDNIGHT_MARGIN_S * 1_000_000:
        time.sleep(left_us / 1_000_000 + 0.05)
