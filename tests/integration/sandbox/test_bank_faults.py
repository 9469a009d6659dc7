"""The fault plan on the payout operations, through both transports: what the caller sees and
what the bank did (asked afterwards with get_payout), and the webhook faults on payout events."""

from __future__ import annotations

import time

import pytest

from paycore.processor.port import ProcessorUnreachable
from paycore_sandbox import FaultPlanError
from tests.integration.sandbox.bank_support import (
    RETURN_MS,
    SETTLE_MS,
    ach,
    at_ms,
    count_rows,
    install_clock,
    payout_events,
    sepa,
)
from tests.integration.sandbox.conftest import Harness

POLL_S_MAX = 5


def plan(*rules: dict[str, object], **options: object) -> dict[str, object]:
    return {"seed": 11, **options, "rules": list(rules)}


def test_drop_request_is_unreachable_and_nothing_was_sent(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "drop_request", "next_n": 1, "ops": ["payout"]}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.send_payout(ach("po_1"))

    assert harness.processor.get_payout("po_1") is None
    assert harness.processor.send_payout(ach("po_1")).status == "accepted"
    assert count_rows(harness.sandbox, "payouts") == 1


def test_drop_response_is_unreachable_but_the_payout_was_accepted(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "drop_response", "next_n": 1, "ops": ["payout"]}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.send_payout(sepa("po_1"))

    found = harness.processor.get_payout("po_1")
    assert found is not None and found.status == "accepted"
    assert harness.processor.send_payout(sepa("po_1")) == found, "the retry answers the original"
    assert count_rows(harness.sandbox, "payouts") == 1


def test_error_500_processes_nothing(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "error_500", "next_n": 2, "ops": ["payout"]}))

    for _ in range(2):
        with pytest.raises(ProcessorUnreachable):
            harness.processor.send_payout(ach("po_1"))
        assert count_rows(harness.sandbox, "payouts") == 0

    assert harness.processor.send_payout(ach("po_1")).status == "accepted"


def test_delay_past_the_timeout_is_unreachable_and_the_payout_exists(harness: Harness) -> None:
    timeout_ms, delay_ms = 300, 1_000
    impatient = harness.with_timeout(timeout_ms)
    harness.sandbox.set_fault_plan(plan({"fault": "delay_ms", "delay_ms": delay_ms, "next_n": 1, "ops": ["payout"]}))
    started = time.monotonic()

    with pytest.raises(ProcessorUnreachable):
        impatient.send_payout(ach("po_1"))

    assert (time.monotonic() - started) * 1000 < delay_ms, "the caller gives up at its timeout"
    found = harness.processor.get_payout("po_1")
    deadline = time.monotonic() + POLL_S_MAX  # the server may commit after the caller gave up
    while found is None and time.monotonic() < deadline:
        time.sleep(0.05)
        found = harness.processor.get_payout("po_1")
    assert found is not None and found.status == "accepted"


def test_delay_within_the_timeout_answers_late(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "delay_ms", "delay_ms": 100, "percent": 100, "ops": ["payout"]}))
    started = time.monotonic()

    assert harness.processor.send_payout(ach("po_1")).status == "accepted"
    assert (time.monotonic() - started) * 1000 >= 100


def test_faults_on_get_payout(harness: Harness) -> None:
    harness.processor.send_payout(ach("po_1"))
    harness.sandbox.set_fault_plan(plan({"fault": "error_500", "next_n": 1, "ops": ["get_payout"]}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.get_payout("po_1")

    assert harness.processor.get_payout("po_1") is not None
    assert harness.processor.get_payout("po_unknown") is None


def test_a_rule_without_ops_leaves_payouts_alone(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "error_500", "percent": 100}))

    assert harness.processor.send_payout(ach("po_1")).status == "accepted"
    assert harness.processor.get_payout("po_1") is not None


def test_settle_late_delays_the_banks_answer(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch)
    harness.sandbox.set_fault_plan(plan({"fault": "settle_late", "next_n": 1, "ops": ["payout"]}, settle_late_ms=5_000))
    harness.processor.send_payout(ach("po_late"))
    harness.processor.send_payout(ach("po_on_time"))

    harness.sandbox.settle_due(at_ms(SETTLE_MS))
    statuses = [found.status for found in map(harness.processor.get_payout, ["po_late", "po_on_time"]) if found]
    assert statuses == ["accepted", "settled"]
    harness.sandbox.settle_due(at_ms(SETTLE_MS + 5_000))
    found = harness.processor.get_payout("po_late")
    assert found is not None and found.status == "settled" and found.settled_at_us == at_ms(SETTLE_MS + 5_000)


def test_duplicate_webhook_queues_every_payout_event_twice(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch)
    harness.sandbox.set_fault_plan(plan({"fault": "duplicate_webhook", "next_n": 1, "ops": ["payout"]}))
    harness.processor.send_payout(ach("po_1", "000222222227"))

    harness.sandbox.settle_due(at_ms(SETTLE_MS))
    harness.sandbox.settle_due(at_ms(RETURN_MS))
    assert harness.sandbox.deliver_due(harness.sink, at_ms(RETURN_MS)) == 4

    events = harness.sink.events()
    assert [event["type"] for event in events] == ["payout.settled"] * 2 + ["payout.returned"] * 2
    assert events[0]["id"] == events[1]["id"] != events[2]["id"] == events[3]["id"]


def test_reorder_webhooks_delivers_the_return_before_the_settlement(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_clock(monkeypatch)
    harness.sandbox.set_fault_plan(plan({"fault": "reorder_webhooks", "next_n": 1, "ops": ["payout"]}))
    harness.processor.send_payout(ach("po_1", "000333333335"))

    harness.sandbox.settle_due(at_ms(SETTLE_MS))
    assert harness.sandbox.deliver_due(harness.sink, at_ms(SETTLE_MS)) == 0, "the settlement is held back"
    harness.sandbox.settle_due(at_ms(RETURN_MS))
    assert harness.sandbox.deliver_due(harness.sink, at_ms(RETURN_MS) + 1) == 2

    events = harness.sink.events()
    assert [(event["type"], event["sequence"]) for event in events] == [("payout.returned", 3), ("payout.settled", 2)]
    assert len(payout_events(harness.sandbox)) == 2


def test_reorder_webhooks_holds_nothing_back_for_a_payout_that_only_settles(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_clock(monkeypatch)
    harness.sandbox.set_fault_plan(plan({"fault": "reorder_webhooks", "next_n": 1, "ops": ["payout"]}))
    harness.processor.send_payout(sepa("po_1"))

    harness.sandbox.settle_due(at_ms(SETTLE_MS))

    assert harness.sandbox.deliver_due(harness.sink, at_ms(SETTLE_MS)) == 1
    assert harness.sink.events()[0]["type"] == "payout.settled"


@pytest.mark.parametrize("fault", ["settle_late", "duplicate_webhook", "reorder_webhooks"])
def test_object_faults_cannot_target_get_payout(harness: Harness, fault: str) -> None:
    with pytest.raises(FaultPlanError, match="'payout', 'charge' and 'refund' only"):
        harness.sandbox.set_fault_plan(plan({"fault": fault, "percent": 100, "ops": ["get_payout"]}))

    assert harness.sandbox.set_fault_plan(plan({"fault": fault, "percent": 100, "ops": ["payout"]}))
