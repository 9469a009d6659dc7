"""The payment transition table and the resolver's backoff, without a database."""

from __future__ import annotations

import random

import pytest

from paycore.lifecycle.evidence import Evidence
from paycore.lifecycle.policy import Policy, backoff_ms
from paycore.payments import states
from paycore.payments.lifecycle import target_of
from paycore.processor.port import ChargeResult

ALL = ("processing", "succeeded", "failed", "in_doubt")


def test_terminal_states_never_change() -> None:
    for terminal in states.TERMINAL:
        assert not any(states.allowed(terminal, other) for other in ALL)


def test_in_doubt_only_goes_forward_by_evidence() -> None:
    assert {to for to in ALL if states.allowed("in_doubt", to)} == {"succeeded", "failed"}
    assert not states.allowed("in_doubt", "processing")


def result(status: str) -> Evidence[ChargeResult]:
    return Evidence.of_result(ChargeResult("pay_1", status, "ch_1", 5, "USD", "card_declined"))  # type: ignore[arg-type]


@pytest.mark.parametrize("current", ["processing", "in_doubt"])
def test_no_answer_never_fails_or_succeeds_a_payment(current: str) -> None:
    for kind in ("unreachable", "not_found"):
        target, _ = target_of(current, Evidence(kind))
        assert target in (None, "in_doubt")
        assert target != "in_doubt" or current == "processing"


def test_results_map_to_states() -> None:
    assert target_of("in_doubt", result("succeeded")) == ("succeeded", None)
    assert target_of("processing", result("failed")) == ("failed", "card_declined")
    assert target_of("processing", result("pending")) == (None, None)
    assert target_of("processing", Evidence("refused", refusal_code="invalid_token")) == ("failed", "invalid_token")


def test_backoff_doubles_is_capped_and_jittered() -> None:
    policy = Policy(attempts_max=10, backoff_ms=1000, backoff_max_ms=8000, lease_ms=1, batch_max=1)
    rng = random.Random(7)
    for attempt, cap in [(1, 1000), (2, 2000), (3, 4000), (4, 8000), (9, 8000), (60, 8000)]:
        delays = {backoff_ms(attempt, policy, rng) for _ in range(200)}
        assert all(cap // 2 <= delay <= cap for delay in delays), (attempt, min(delays), max(delays))
        assert len(delays) > 1  # jittered
        assert all(type(delay) is int for delay in delays)
