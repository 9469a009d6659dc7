"""Authorizations under the fault plan, their webhooks, their report lines, races on both
databases, and that paycore takes their events."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from paycore.db.engine import Database
from paycore.inbound.service import Received, receive
from paycore.kit import clock
from paycore.kit.signing import sign
from paycore.processor.port import ChargeRequest, ChargeResult, ProcessorRefused, ProcessorUnreachable
from paycore_sandbox import FaultPlanError, Sandbox
from paycore_sandbox.service import SandboxSchemaOutdated
from paycore_sandbox.settlement import fee_minor
from tests.integration.sandbox.authorization_support import (
    AMOUNT_MINOR,
    CURRENCY,
    MERCHANT,
    actions,
    authorization,
    authorize,
    cancel_of,
    capture_of,
    delivered_events,
    event_types,
)
from tests.integration.sandbox.conftest import SECRET, SETTINGS, Harness
from tests.integration.sandbox.test_dedupe import THREADS, all_at_once
from tests.support.days import clear_of_midnight

LATER_US = 3 * 1_000_000
# What a charge event carried before authorizations; an automatic charge's still carries exactly this.
CHARGE_EVENT_FIELDS = {
    "object",
    "request_id",
    "merchant_id",
    "processor_charge_id",
    "status",
    "amount_minor",
    "currency",
    "failure_code",
}


@pytest.fixture
def harness(harness_on_backends: Harness) -> Harness:
    """Every test of this file through both transports on SQLite, and in process on PostgreSQL."""
    return harness_on_backends


def test_a_capture_whose_answer_is_lost_is_done_once_and_answered_on_retry(harness: Harness) -> None:
    authorized = authorize(harness)
    harness.sandbox.set_fault_plan({"rules": [{"fault": "drop_response", "next_n": 1, "ops": ["capture"]}]})

    with pytest.raises(ProcessorUnreachable):
        harness.processor.capture(capture_of(authorized, 3_000))
    assert harness.processor.get_charge("pay_1").status == "captured"  # type: ignore[union-attr]
    retried = harness.processor.capture(capture_of(authorized, 3_000))

    assert (retried.status, retried.amount_captured_minor, retried.amount_released_minor) == ("captured", 3_000, 2_000)
    assert actions(harness.sandbox) == 1
    assert event_types(harness.sandbox) == ["charge.requires_capture", "charge.captured"]


@pytest.mark.parametrize("fault", ["drop_request", "error_500"])
def test_a_cancel_that_never_arrives_changes_nothing_and_a_retry_cancels(harness: Harness, fault: str) -> None:
    authorized = authorize(harness)
    harness.sandbox.set_fault_plan({"rules": [{"fault": fault, "next_n": 1, "ops": ["cancel"]}]})

    with pytest.raises(ProcessorUnreachable):
        harness.processor.cancel(cancel_of(authorized))
    assert harness.processor.get_charge("pay_1") == authorized
    assert actions(harness.sandbox) == 0

    assert harness.processor.cancel(cancel_of(authorized)).status == "canceled"
    assert event_types(harness.sandbox) == ["charge.requires_capture", "charge.canceled"]


def test_a_rule_without_ops_does_not_hit_captures(harness: Harness) -> None:
    authorized = authorize(harness)
    harness.sandbox.set_fault_plan({"rules": [{"fault": "error_500", "percent": 100}]})

    assert harness.processor.capture(capture_of(authorized, 1_000)).status == "captured"


def test_only_the_webhook_faults_may_name_capture_and_cancel(harness: Harness) -> None:
    harness.sandbox.set_fault_plan(
        {"rules": [{"fault": "duplicate_webhook", "percent": 50, "ops": ["capture", "cancel"]}]}
    )
    for fault in ("settle_late", "report_drop_line"):
        with pytest.raises(FaultPlanError, match="'payout', 'charge' and 'refund' only"):
            harness.sandbox.set_fault_plan({"rules": [{"fault": fault, "percent": 50, "ops": ["capture"]}]})


def test_each_event_is_delivered_once_signed_with_the_authorizations_amounts(harness: Harness) -> None:
    authorized = authorize(harness)
    harness.processor.capture(capture_of(authorized, 3_000))

    events = delivered_events(harness)

    assert [event["type"] for event in events] == ["charge.requires_capture", "charge.captured"]
    assert [event["sequence"] for event in events] == [1, 3]
    assert authorized.authorization_expires_at_us is not None
    assert events[1]["data"] == {
        "object": "charge",
        "request_id": "pay_1",
        "merchant_id": MERCHANT,
        "processor_charge_id": authorized.processor_charge_id,
        "status": "captured",
        "amount_minor": AMOUNT_MINOR,
        "currency": CURRENCY,
        "failure_code": None,
        "capture": "manual",
        "amount_capturable_minor": 0,
        "amount_captured_minor": 3_000,
        "amount_released_minor": 2_000,
        "authorization_expires_at": clock.to_rfc3339(authorized.authorization_expires_at_us),
    }
    assert events[0]["data"]["amount_capturable_minor"] == AMOUNT_MINOR
    assert harness.sandbox.deliver_due(harness.sink, harness.later_us()) == 0  # nothing twice


def test_duplicate_webhook_on_a_capture_sends_its_event_twice_with_one_id(harness: Harness) -> None:
    authorized = authorize(harness)
    harness.sandbox.set_fault_plan({"rules": [{"fault": "duplicate_webhook", "next_n": 1, "ops": ["capture"]}]})
    harness.processor.capture(capture_of(authorized, 1_000))

    events = delivered_events(harness)

    assert [event["type"] for event in events] == ["charge.requires_capture", "charge.captured", "charge.captured"]
    assert events[1]["id"] == events[2]["id"]


def test_reorder_webhooks_on_an_authorization_sends_its_closing_event_first(harness: Harness) -> None:
    harness.sandbox.set_fault_plan({"rules": [{"fault": "reorder_webhooks", "next_n": 1, "ops": ["charge"]}]})
    authorized = authorize(harness)
    assert delivered_events(harness) == []  # held until the authorization closes

    harness.processor.cancel(cancel_of(authorized))

    assert [event["type"] for event in delivered_events(harness)] == ["charge.canceled", "charge.requires_capture"]


def test_an_automatic_charge_emits_no_new_event_type_nor_field(harness: Harness) -> None:
    for request_id, token in (("pay_1", "tok_ok"), ("pay_2", "tok_pending"), ("pay_3", "tok_declined")):
        harness.processor.charge(ChargeRequest(request_id, MERCHANT, AMOUNT_MINOR, CURRENCY, token))
    harness.sandbox.settle_due(harness.later_us())

    events = delivered_events(harness)

    assert {event["type"] for event in events} == {"charge.succeeded", "charge.pending", "charge.failed"}
    assert all(set(event["data"]) == CHARGE_EVENT_FIELDS for event in events)


def test_paycore_takes_an_authorizations_events_as_evidence(harness: Harness, database: Database) -> None:
    """paycore knows authorizations (issue 40 point 2; it answered 400 before): it verifies
    each event of an authorization's life and keeps it; one about a payment it does not know
    (as here: the sandbox was called directly) is kept `unmatched` for the rematch worker,
    never refused. What it does with one it knows: tests/integration/payments/."""
    harness.processor.capture(capture_of(authorize(harness), 1_000))
    events = delivered_events(harness)
    assert [event["type"] for event in events] == ["charge.requires_capture", "charge.captured"]
    for event in events:
        body = json.dumps(event).encode()
        signature = sign(SECRET, clock.now_us() // 1_000_000, body)
        assert receive(database, SECRET, signature, body) == Received(event["id"], "unmatched")
        assert receive(database, SECRET, signature, body) == Received(event["id"], "duplicate")


def test_the_report_lists_captures_at_their_captured_amount_and_no_authorization(harness: Harness) -> None:
    clear_of_midnight()
    captured = authorize(harness, "pay_1")
    harness.processor.cancel(cancel_of(authorize(harness, "pay_2")))
    authorize(harness, "pay_3", "tok_expires_quickly")
    harness.processor.charge(ChargeRequest("pay_4", MERCHANT, 2_500, CURRENCY, "tok_ok"))
    harness.processor.charge(authorization("pay_5", "tok_declined"))
    harness.sandbox.settle_due(clock.now_us() + LATER_US)  # pay_3 expires
    harness.processor.capture(capture_of(captured, 3_000))
    harness.processor.capture(capture_of(authorize(harness, "pay_6"), 1_000, request_id="cap_6"))

    day = clock.to_rfc3339(clock.now_us())[:10]
    rows = list(csv.DictReader(harness.processor.settlement_report(day)))

    lines = [(row["type"], row["request_id"], row["amount_minor"], row["status"], row["fee_minor"]) for row in rows]
    assert lines == [
        ("charge", "pay_4", "2500", "succeeded", str(fee_minor("charge", "succeeded", 2_500))),
        ("charge", "pay_1", "3000", "succeeded", str(fee_minor("charge", "succeeded", 3_000))),
        ("charge", "pay_6", "1000", "succeeded", str(fee_minor("charge", "succeeded", 1_000))),
    ]
    assert rows[1]["processor_id"] == captured.processor_charge_id


def _captures_racing(sandbox: Sandbox, authorized: ChargeResult, index: int) -> ChargeResult:
    if index % 2:
        return sandbox.cancel(cancel_of(authorized, request_id=f"can_{index}"))
    return sandbox.capture(capture_of(authorized, 1_000 + index, request_id=f"cap_{index}"))


def test_captures_and_cancels_racing_close_an_authorization_once_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    authorized = sandbox_on_backend.charge(authorization())

    results = all_at_once(lambda index: _captures_racing(sandbox_on_backend, authorized, index))

    won = [result for result in results if isinstance(result, ChargeResult)]
    lost = [result for result in results if not isinstance(result, ChargeResult)]
    assert len(won) == 1 and len(lost) == THREADS - 1
    assert all(isinstance(error, ProcessorRefused) for error in lost), lost
    assert {error.code for error in lost if isinstance(error, ProcessorRefused)} <= {
        "charge_not_capturable",
        "charge_not_cancelable",
    }
    now = sandbox_on_backend.get_charge("pay_1")
    assert now == won[0] and actions(sandbox_on_backend) == 1
    captured = now.amount_captured_minor or 0
    assert captured + (now.amount_released_minor or 0) == AMOUNT_MINOR
    assert len(event_types(sandbox_on_backend)) == 2


def test_one_capture_request_sent_at_once_is_one_capture_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    authorized = sandbox_on_backend.charge(authorization())

    results = all_at_once(lambda _: sandbox_on_backend.capture(capture_of(authorized, 2_000)))

    assert all(isinstance(result, ChargeResult) for result in results), results
    assert len({result for result in results}) == 1
    assert actions(sandbox_on_backend) == 1
    assert event_types(sandbox_on_backend) == ["charge.requires_capture", "charge.captured"]


def test_a_sandbox_database_from_before_authorizations_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE sandbox_charges (request_id TEXT PRIMARY KEY)"))
    engine.dispose()

    with pytest.raises(SandboxSchemaOutdated, match="manual capture"):
        Sandbox.open(url, settings=SETTINGS)
