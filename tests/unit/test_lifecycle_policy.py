"""The one retry policy, and the generic evidence rules, without a database."""

from __future__ import annotations

import random

from paycore.lifecycle.evidence import Decision, Evidence
from paycore.lifecycle.policy import Backoff, Policy, delay_ms, next_attempt_at_us, retry_at_us

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


def test_one_backoff_is_whole_milliseconds_bounded_and_jittered_for_any_attempt() -> None:
    backoff = Backoff(first_ms=1000, max_ms=3_600_000)
    rng = random.Random(7)
    for attempt in (1, 2, 12, 50, 10**6):
        cap_ms = min(3_600_000, 1000 * 2 ** min(attempt - 1, 30))
        drawn = {delay_ms(attempt, backoff, rng) for _ in range(50)}
        assert all(isinstance(ms, int) and cap_ms // 2 <= ms <= cap_ms for ms in drawn), (attempt, drawn)
        assert len(drawn) > 1  # jitter: not one delay for every item


def test_giving_up_after_attempts_max_or_once_the_retry_window_is_over() -> None:
    backoff, rng = Backoff(first_ms=1000, max_ms=8000), random.Random(1)
    assert retry_at_us(2, backoff, rng, now_us=NOW_US, attempts_max=3) is not None
    assert retry_at_us(3, backoff, rng, now_us=NOW_US, attempts_max=3) is None
    assert retry_at_us(9, backoff, rng, now_us=NOW_US, until_us=NOW_US + 1) is not None
    assert retry_at_us(9, backoff, rng, now_us=NOW_US, until_us=NOW_US) is None
    forever = retry_at_us(10**6, backoff, rng, now_us=NOW_US)
    assert forever is not None and NOW_US + 4_000_000 <= forever <= NOW_US + 8_000_000
