"""The one retry policy, and the generic evidence rules, without a database."""

from __future__ import annotations

import random

from paycore.lifecycle.evidence import Decision, Evidence
from paycore.lifecycle.policy import Policy, next_attempt_at_us

POLICY = Policy(attempts_max=3, backoff_ms=1000, backoff_max_ms=8000, lease_ms=1, batch_max=1)
NOW_US = 10_000_000


def test_the_next_attempt_is_backed_off_from_now() -> None:
    rng = random.Random(1)
    for attempts, cap_ms in [(1, 1000), (2, 2000)]:
        due = next_attempt_at_us(attempts, POLICY, rng, now_us=NOW_US)
        assert due is not None and NOW_US + cap_ms * 500 <= due <= NOW_US + cap_ms * 1000


def test_out_of_rounds_is_none_unless_the_item_is_never_given_up() -> None:
    rng = random.Random(1)
    assert next_attempt_at_us(3, POLICY, rng, now_us=NOW_US) is None
    polled = next_attempt_at_us(30, POLICY, rng, now_us=NOW_US, give_up=False)
    assert polled is not None and NOW_US + 4_000_000 <= polled <= NOW_US + 8_000_000  # capped


def test_evidence_that_proves_nothing_carries_no_result() -> None:
    assert Evidence("unreachable").result is None and Evidence("not_found").result is None
    assert Evidence.of_result("x", operation="get").kind == "result"
    assert Decision().path == () and Decision().values == {}
