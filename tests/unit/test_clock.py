"""Rendering a stored time never fails: past year 9999 the integer path takes over, and it
agrees with the standard library wherever both work."""

from __future__ import annotations

import random

from paycore.kit.clock import _far_rfc3339, to_rfc3339


def test_the_integer_path_agrees_with_datetime_wherever_both_work() -> None:
    rng = random.Random(21)
    for seconds in [0, -1, 86_399, 951_782_400, 4_107_542_400, 253_402_300_799] + [
        rng.randrange(-62_135_596_800, 253_402_300_800) for _ in range(2_000)
    ]:
        micros = rng.randrange(1_000_000)
        assert _far_rfc3339(seconds, micros) == to_rfc3339(seconds * 1_000_000 + micros), seconds


def test_a_time_past_year_9999_renders() -> None:
    assert to_rfc3339(253_402_300_800 * 1_000_000) == "10000-01-01T00:00:00.000000Z"
    assert to_rfc3339(2**63 - 1).startswith("294247-01-10T04:00:54.")
