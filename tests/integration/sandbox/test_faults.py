"""Each fault of the plan, through both transports: what the caller sees, and what the
processor did (get_* afterwards, and the webhooks it sent)."""

from __future__ import annotations

import threading
import time

import pytest

from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ChargeRequest, ProcessorUnreachable, RefundRequest
from paycore_sandbox import Sandbox
from tests.integration.sandbox.conftest import Harness, RecordingSink, StartServer, count

CHARGE = ChargeRequest("pay_1", "merchant_1", 2_500, "USD", "tok_ok")


def plan(*rules: dict[str, object], **options: object) -> dict[str, object]:
    return {"seed": 7, **options, "rules": list(rules)}


def status_of(harness: Harness, request_id: str) -> str | None:
    found = harness.processor.get_charge(request_id)
    return None if found is None else found.status


def test_drop_request_is_unreachable_and_nothing_happened(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "drop_request", "next_n": 1}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.charge(CHARGE)

    assert harness.processor.get_charge("pay_1") is None
    assert harness.processor.charge(CHARGE).status == "succeeded"  # the retry goes through
    assert count(harness.sandbox, "charges") == 1


def test_drop_response_is_unreachable_but_the_charge_was_taken(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "drop_response", "next_n": 1, "ops": ["charge"]}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.charge(CHARGE)

    found = harness.processor.get_charge("pay_1")
    assert found is not None and found.status == "succeeded"
    assert harness.processor.charge(CHARGE) == found  # the retry answers the original
    assert count(harness.sandbox, "charges") == 1


def test_delay_past_the_timeout_is_unreachable_and_the_charge_exists(harness: Harness) -> None:
    timeout_ms, delay_ms = 300, 1_000
    impatient = harness.with_timeout(timeout_ms)
    harness.sandbox.set_fault_plan(plan({"fault": "delay_ms", "delay_ms": delay_ms, "next_n": 1}))
    started = time.monotonic()

    with pytest.raises(ProcessorUnreachable):
        impatient.charge(CHARGE)

    waited_ms = (time.monotonic() - started) * 1000
    assert timeout_ms * 0.9 <= waited_ms < delay_ms, "the caller gives up at its timeout, before the answer"
    # The processor goes on without the caller: the charge exists, though on a loaded machine the
    # server may commit it only after the caller gave up, so look for it for a bounded while.
    found = harness.processor.get_charge("pay_1")
    deadline = time.monotonic() + 5
    while found is None and time.monotonic() < deadline:
        time.sleep(0.05)
        found = harness.processor.get_charge("pay_1")
    assert found is not None and found.status == "succeeded"


def test_delay_within_the_timeout_answers_late(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "delay_ms", "delay_ms": 100, "percent": 100}))
    started = time.monotonic()

    result = harness.processor.charge(CHARGE)

    assert result.status == "succeeded"
    assert (time.monotonic() - started) * 1000 >= 100


def test_error_500_for_the_next_two_calls_processes_nothing(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "error_500", "next_n": 2}))

    for _ in range(2):
        with pytest.raises(ProcessorUnreachable):
            harness.processor.charge(CHARGE)
        assert count(harness.sandbox, "charges") == 0

    assert harness.processor.charge(CHARGE).status == "succeeded"


def test_faults_on_reads(harness: Harness) -> None:
    harness.processor.charge(CHARGE)
    harness.sandbox.set_fault_plan(plan({"fault": "error_500", "next_n": 1, "ops": ["get_charge"]}))

    with pytest.raises(ProcessorUnreachable):
        harness.processor.get_charge("pay_1")

    assert harness.processor.get_charge("pay_1") is not None


def test_settle_late_answers_pending_then_succeeds_by_webhook_and_by_get(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "settle_late", "next_n": 1}, settle_late_ms=500))

    assert harness.processor.charge(CHARGE).status == "pending"
    assert harness.sandbox.settle_due() == 0
    assert status_of(harness, "pay_1") == "pending"
    assert harness.sandbox.settle_due(harness.later_us()) == 1

    assert status_of(harness, "pay_1") == "succeeded"
    assert harness.sandbox.deliver_due(harness.sink, harness.later_us()) == 2
    events = harness.sink.events()
    assert [(event["type"], event["sequence"]) for event in events] == [("charge.pending", 1), ("charge.succeeded", 2)]


def test_settle_late_refund(harness: Harness) -> None:
    charged = harness.processor.charge(CHARGE)
    harness.sandbox.set_fault_plan(plan({"fault": "settle_late", "percent": 100, "ops": ["refund"]}))

    pending = harness.processor.refund(RefundRequest("rf_1", "merchant_1", charged.processor_charge_id, 500, "USD"))
    harness.sandbox.settle_due(harness.later_us())

    assert pending.status == "pending"
    found = harness.processor.get_refund("rf_1")
    assert found is not None and found.status == "succeeded"


def test_duplicate_webhook_delivers_the_same_event_twice(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(plan({"fault": "duplicate_webhook", "next_n": 1}))

    harness.processor.charge(CHARGE)
    assert harness.sandbox.deliver_due(harness.sink) == 2

    first, second = harness.sink.received
    assert first[0] == second[0]  # the same bytes: the same event id, the same body
    assert harness.sink.events()[0]["id"] == harness.sink.events()[1]["id"]
    assert harness.sink.events()[0]["id"].startswith("evt_sbx_")


def test_reorder_webhooks_delivers_the_later_status_first(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(
        plan({"fault": "settle_late", "next_n": 1}, {"fault": "reorder_webhooks", "next_n": 1}, settle_late_ms=0)
    )

    harness.processor.charge(CHARGE)
    assert harness.sandbox.deliver_due(harness.sink) == 0, "the pending event is held back"
    harness.sandbox.settle_due(harness.later_us())
    assert harness.sandbox.deliver_due(harness.sink, harness.later_us()) == 2

    events = harness.sink.events()
    assert [event["sequence"] for event in events] == [2, 1]
    assert [event["data"]["status"] for event in events] == ["succeeded", "pending"]
    assert events[1]["created_at"] < events[0]["created_at"]


def test_percent_rules_follow_the_seed(harness: Harness) -> None:
    def outcomes() -> list[bool]:
        harness.sandbox.set_fault_plan(plan({"fault": "error_500", "percent": 50, "ops": ["get_charge"]}))
        seen = []
        for _ in range(12):
            try:
                harness.processor.get_charge("pay_1")
                seen.append(True)
            except ProcessorUnreachable:
                seen.append(False)
        return seen

    first = outcomes()
    assert outcomes() == first
    assert True in first and False in first


def test_a_held_answer_ends_when_the_sandbox_releases_its_holds(
    sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer
) -> None:
    """A server shutting down (or a closing sandbox) does not wait out `hold_ms` for a caller
    that has given up: release_held answers every held call now, and holds nothing after. Only
    the HTTP server holds a dropped call (in process it is unreachable at once)."""
    processor = HttpTransport(serve_sandbox(sandbox, sink), timeout_ms=20_000)
    sandbox.set_fault_plan(plan({"fault": "drop_response", "next_n": 1, "ops": ["charge"]}, hold_ms=30_000))
    timer = threading.Timer(0.3, sandbox.release_held)
    timer.start()
    started = time.monotonic()

    with pytest.raises(ProcessorUnreachable):
        processor.charge(CHARGE)

    assert time.monotonic() - started < 10, "answered at the release, not after the hold or the timeout"
    timer.join()
    started = time.monotonic()
    sandbox.hold(30_000)
    assert time.monotonic() - started < 1
