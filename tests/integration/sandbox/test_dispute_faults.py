"""Disputes under the fault plan (every dispute call and webhook), their signed webhooks, their
settlement report lines, races on both databases, the background's timing, and a sandbox
database from before disputes."""

from __future__ import annotations

import csv
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from paycore.kit import clock
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore.processor.port import ChargeRequest, ProcessorUnreachable
from paycore_sandbox import FaultPlanError, Sandbox, SandboxSettings
from paycore_sandbox.disputes import LOSING_EVIDENCE, WINNING_EVIDENCE, DisputeResult, OpenDisputeRequest
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.limits import (
    DISPUTE_EVIDENCE_WINDOW_ENV,
    DISPUTE_STEP_MS_MAX,
    EVIDENCE_TEXT_LENGTH_MAX,
    settings_from_environment,
)
from paycore_sandbox.service import SandboxSchemaOutdated
from paycore_sandbox.settlement import fee_minor
from tests.integration.sandbox.conftest import SECRET, SETTINGS, TIMEOUT_MS, Harness, RecordingSink, StartServer
from tests.integration.sandbox.dispute_support import (
    AMOUNT_MINOR,
    CURRENCY,
    MERCHANT,
    accept,
    after,
    charge,
    disputes_of,
    event_types,
    evidence,
    open_one,
    refused,
)
from tests.integration.sandbox.test_dedupe import THREADS, all_at_once
from tests.integration.sandbox.test_http_api import call
from tests.support.days import clear_of_midnight

DISPUTE_EVENT_FIELDS = {
    "object",
    "dispute_id",
    "charge_request_id",
    "payment_reference",
    "merchant_id",
    "type",
    "status",
    "reason",
    "amount_minor",
    "currency",
    "fee_minor",
    "evidence_due_by",
    "evidence_submitted",
    "created_at",
    "closed_at",
}


@pytest.fixture
def harness(harness_on_backends: Harness) -> Harness:
    return harness_on_backends


def _plan(harness: Harness, *rules: dict[str, object]) -> None:
    harness.sandbox.set_fault_plan({"seed": 1, "rules": list(rules)})


def _delivered(harness: Harness) -> list[dict[str, Any]]:
    for _ in range(5):
        harness.sandbox.deliver_due(harness.sink, harness.later_us())
    return [event for event in harness.sink.events() if str(event["type"]).startswith("dispute.")]


def test_a_lost_answer_to_evidence_is_recovered_by_retrying_its_request_id(harness: Harness) -> None:
    opened = open_one(harness)
    _plan(harness, {"fault": "drop_response", "next_n": 1, "ops": ["dispute_evidence"]})
    disputes = disputes_of(harness)

    with pytest.raises(ProcessorUnreachable):
        disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE))

    assert disputes.get_dispute(opened.dispute_id).status == "under_review"  # type: ignore[union-attr]
    assert disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE)).status == "under_review"
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created", "dispute.updated"]


@pytest.mark.parametrize("fault", ["drop_request", "error_500"])
def test_an_accept_that_never_arrived_changes_nothing(harness: Harness, fault: str) -> None:
    opened = open_one(harness)
    _plan(harness, {"fault": fault, "next_n": 1, "ops": ["dispute_accept"]})
    disputes = disputes_of(harness)

    with pytest.raises(ProcessorUnreachable):
        disputes.accept_dispute(accept(opened))

    assert disputes.get_dispute(opened.dispute_id).status == "needs_response"  # type: ignore[union-attr]
    assert disputes.accept_dispute(accept(opened)).status == "lost"


def test_the_admin_open_and_the_reads_are_faulted_too(harness: Harness) -> None:
    charged = charge(harness)
    _plan(
        harness,
        {"fault": "drop_response", "next_n": 1, "ops": ["dispute_open"]},
        {"fault": "error_500", "next_n": 1, "ops": ["get_dispute"]},
    )
    disputes = disputes_of(harness)

    with pytest.raises(ProcessorUnreachable):
        disputes.open_dispute(OpenDisputeRequest(charged.processor_charge_id))
    with pytest.raises(ProcessorUnreachable):
        disputes.disputes_of_charge("pay_1")

    [opened] = disputes.disputes_of_charge("pay_1")  # opened, its answer lost
    refused(lambda: disputes.open_dispute(OpenDisputeRequest(charged.processor_charge_id)), "charge_already_disputed")
    assert opened.status == "needs_response"


def test_a_delayed_answer_past_the_timeout_was_processed(harness: Harness) -> None:
    opened = open_one(harness)
    _plan(harness, {"fault": "delay_ms", "delay_ms": 300, "next_n": 1, "ops": ["dispute_evidence"]})
    impatient = disputes_of(harness, timeout_ms=100)

    with pytest.raises(ProcessorUnreachable):
        impatient.submit_evidence(evidence(opened, WINNING_EVIDENCE))

    assert disputes_of(harness).get_dispute(opened.dispute_id).status == "under_review"  # type: ignore[union-attr]


def test_dispute_webhooks_are_signed_and_carry_the_dispute(harness: Harness) -> None:
    opened = open_one(harness)
    disputes_of(harness).submit_evidence(evidence(opened, LOSING_EVIDENCE))
    harness.sandbox.settle_due(after(5))

    events = _delivered(harness)

    assert [(event["type"], event["sequence"]) for event in events] == [
        ("dispute.created", 1),
        ("dispute.updated", 2),
        ("dispute.closed", 3),
    ]
    assert all(set(event["data"]) == DISPUTE_EVENT_FIELDS for event in events)
    statuses = [event["data"]["status"] for event in events]
    assert statuses == ["needs_response", "under_review", "lost"]
    for body, headers in harness.sink.received:
        timestamp = int(headers[SIGNATURE_HEADER].split(",")[0].removeprefix("t="))
        assert headers[SIGNATURE_HEADER] == sign(SECRET, timestamp, body)


def test_drop_webhook_loses_the_event_of_the_call_only(harness: Harness) -> None:
    _plan(harness, {"fault": "drop_webhook", "next_n": 1, "ops": ["dispute_open"]})
    opened = open_one(harness)
    disputes_of(harness).accept_dispute(accept(opened))

    assert [event["type"] for event in _delivered(harness)] == ["dispute.closed"]
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.closed"]


def test_duplicate_and_reorder_apply_to_a_disputes_events(harness: Harness) -> None:
    _plan(
        harness,
        {"fault": "reorder_webhooks", "next_n": 1, "ops": ["dispute_open"]},
        {"fault": "duplicate_webhook", "next_n": 1, "ops": ["dispute_accept"]},
    )
    opened = open_one(harness)
    disputes_of(harness).accept_dispute(accept(opened))

    events = _delivered(harness)

    assert [event["type"] for event in events] == ["dispute.closed", "dispute.closed", "dispute.created"]
    assert events[0]["id"] == events[1]["id"]


def test_a_tok_disputed_dispute_takes_the_webhook_faults_of_dispute_open(harness: Harness) -> None:
    charge(harness, token="tok_disputed")
    _plan(harness, {"fault": "duplicate_webhook", "next_n": 1, "ops": ["dispute_open"]})
    harness.sandbox.settle_due(after(5))

    assert [event["type"] for event in _delivered(harness)] == ["dispute.created", "dispute.created"]


def test_the_plan_names_the_dispute_operations_and_bounds_drop_webhook(sandbox: Sandbox) -> None:
    sandbox.set_fault_plan({"rules": [{"fault": "error_500", "percent": 10, "ops": ["get_dispute", "dispute_open"]}]})
    with pytest.raises(FaultPlanError, match="drop_webhook"):
        sandbox.set_fault_plan({"rules": [{"fault": "drop_webhook", "percent": 10, "ops": ["charge"]}]})
    with pytest.raises(FaultPlanError, match="settle_late"):
        sandbox.set_fault_plan({"rules": [{"fault": "settle_late", "percent": 10, "ops": ["dispute_open"]}]})
    assert sandbox.fault_plan()["rules"][0]["ops"] == ["get_dispute", "dispute_open"]


def test_the_report_lists_withdrawals_fees_and_reinstatements_beside_the_charges(harness: Harness) -> None:
    clear_of_midnight()
    disputes = disputes_of(harness)
    won = open_one(harness, "pay_1", amount_minor=3_000)
    lost = open_one(harness, "pay_2")
    inquiry = open_one(harness, "pay_3", type="inquiry")
    disputes.submit_evidence(evidence(won, WINNING_EVIDENCE))
    disputes.accept_dispute(accept(lost))
    disputes.accept_dispute(accept(inquiry, "ac_2"))
    decided_at_us = clock.now_us() + 2 * SETTINGS.dispute_decision_after_ms * 1_000
    harness.sandbox.settle_due(decided_at_us)

    day = clock.to_rfc3339(clock.now_us())[:10]
    rows = list(csv.DictReader(harness.processor.settlement_report(day)))

    charge_fee = str(fee_minor("charge", "succeeded", AMOUNT_MINOR))
    lines = [(row["type"], row["request_id"], row["amount_minor"], row["fee_minor"], row["status"]) for row in rows]
    fee = str(SETTINGS.dispute_fee_minor)
    assert lines == [
        ("charge", "pay_1", "5000", charge_fee, "succeeded"),
        ("dispute_fee", "pay_1", fee, "0", "charged"),
        ("dispute_withdrawal", "pay_1", "3000", "0", "withdrawn"),
        ("charge", "pay_2", "5000", charge_fee, "succeeded"),
        ("dispute_fee", "pay_2", fee, "0", "charged"),
        ("dispute_withdrawal", "pay_2", "5000", "0", "withdrawn"),
        ("charge", "pay_3", "5000", charge_fee, "succeeded"),
        ("dispute_reinstatement", "pay_1", "3000", "0", "reinstated"),
    ]
    dispute_rows = [row for row in rows if row["type"].startswith("dispute_")]
    assert {row["processor_id"] for row in dispute_rows} == {won.dispute_id, lost.dispute_id}
    assert all(row["currency"] == CURRENCY and row["batch_id"] == "" for row in dispute_rows)
    assert {row["code"] for row in dispute_rows} == {"fraudulent"}
    assert rows[-1]["created_at"] == clock.to_rfc3339(decided_at_us)


def _answers_racing(sandbox: Sandbox, dispute: DisputeResult, index: int) -> DisputeResult:
    if index % 2:
        return sandbox.accept_dispute(accept(dispute, f"ac_{index}"))
    return sandbox.submit_evidence(evidence(dispute, WINNING_EVIDENCE, f"ev_{index}"))


def test_evidence_and_accepts_racing_answer_a_dispute_once_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    charged = sandbox_on_backend.charge(ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_ok"))
    opened = sandbox_on_backend.open_dispute(OpenDisputeRequest(charged.processor_charge_id))

    results = all_at_once(lambda index: _answers_racing(sandbox_on_backend, opened, index))

    won = [result for result in results if isinstance(result, DisputeResult)]
    assert len(won) == 1, results
    assert all(getattr(error, "code", None) == "dispute_not_open" for error in results if error not in won), results
    assert len(results) == THREADS
    assert sandbox_on_backend.get_dispute(opened.dispute_id) == won[0]
    assert len(event_types(sandbox_on_backend, opened.dispute_id)) == 2


def test_the_background_disputes_tok_disputed_about_a_second_after_it_succeeds(sandbox: Sandbox) -> None:
    processor = InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS)
    sink = RecordingSink()
    background = sandbox.start_background(sink, interval_ms=50)
    try:
        started = time.monotonic()
        processor.charge(ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_disputed"))
        while not [event for event in sink.events() if event["type"] == "dispute.created"]:
            assert time.monotonic() - started < 5, "no dispute within 5 s"
            time.sleep(0.05)
        elapsed_s = time.monotonic() - started
    finally:
        background.stop()

    assert SETTINGS.dispute_open_after_ms / 1000 <= elapsed_s < SETTINGS.dispute_open_after_ms / 1000 + 2
    [created] = [event for event in sink.events() if event["type"] == "dispute.created"]
    assert created["data"]["reason"] == "fraudulent" and created["data"]["fee_minor"] == 1_500


def test_an_answer_after_the_deadline_is_refused_before_the_background_runs(tmp_path: Path) -> None:
    settings = dataclasses.replace(SETTINGS, dispute_evidence_window_ms=200)
    short = Sandbox.open(f"sqlite:///{tmp_path / 'short.db'}", webhook_secret=SECRET, settings=settings)
    try:
        charged = short.charge(ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_ok"))
        opened = short.open_dispute(OpenDisputeRequest(charged.processor_charge_id))
        time.sleep(0.3)

        refusal = refused(lambda: short.submit_evidence(evidence(opened, WINNING_EVIDENCE)), "dispute_not_open")

        assert "evidence window" in str(refusal)
        assert short.get_dispute(opened.dispute_id).status == "lost"  # type: ignore[union-attr]
        refused(lambda: short.submit_evidence(evidence(opened, WINNING_EVIDENCE)), "dispute_not_open")
        assert event_types(short, opened.dispute_id) == ["dispute.created", "dispute.closed"]
    finally:
        short.close()


def test_a_sandbox_database_from_before_disputes_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Sandbox.open(url, settings=SETTINGS).close()
    engine = create_engine(url)
    with engine.begin() as connection:
        for table in ("sandbox_dispute_actions", "sandbox_planned_disputes", "sandbox_disputes"):
            connection.execute(text(f"DROP TABLE {table}"))
    engine.dispose()

    with pytest.raises(SandboxSchemaOutdated, match="predates disputes"):
        Sandbox.open(url, settings=SETTINGS)


def test_the_environment_sets_the_evidence_window_of_a_sandbox_opened_without_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISPUTE_EVIDENCE_WINDOW_ENV, "1500")
    opened = Sandbox.open(f"sqlite:///{tmp_path / 'env.db'}", webhook_secret=SECRET)
    try:
        assert opened.settings.dispute_evidence_window_ms == 1_500
    finally:
        opened.close()
    assert settings_from_environment({}) == SandboxSettings()
    for wrong in ("0", "1.5", "7d", "", "\uff11\uff15", str(DISPUTE_STEP_MS_MAX + 1)):
        with pytest.raises(ValueError, match=DISPUTE_EVIDENCE_WINDOW_ENV):
            settings_from_environment({DISPUTE_EVIDENCE_WINDOW_ENV: wrong})


def test_over_http_bodies_are_read_strictly(sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer) -> None:
    base_url = serve_sandbox(sandbox, sink)
    charged = sandbox.charge(ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_ok"))
    reference = charged.processor_charge_id

    for body, code in (
        ({"payment_reference": reference, "amount_minor": 10.5}, "invalid_amount"),
        ({"payment_reference": reference, "amount_minor": "100"}, "invalid_amount"),
        ({"payment_reference": reference, "currency": "EUR"}, "invalid_request"),
        ({"payment_reference": reference, "type": "retrieval"}, "invalid_request"),
        ({}, "invalid_request"),
    ):
        status, answer = call(base_url, "POST", "/v1/sandbox/disputes", body)
        assert (status, answer["error"]) == (400, code), (body, answer)
    assert sandbox.disputes_of_charge("pay_1") == []

    status, opened = call(base_url, "POST", "/v1/sandbox/disputes", {"payment_reference": reference})
    assert status == 200
    path = f"/v1/disputes/{opened['dispute_id']}"
    too_long = {"request_id": "ev_1", "merchant_id": MERCHANT, "text": "x" * (EVIDENCE_TEXT_LENGTH_MAX + 1)}
    assert call(base_url, "POST", f"{path}/evidence", too_long)[0] == 400
    assert call(base_url, "GET", "/v1/disputes")[0] == 400, "a charge request id is needed to list"
    assert call(base_url, "GET", "/v1/disputes/dp_sbx_unknown") == (
        404,
        {"error": "not_found", "message": "no dispute 'dp_sbx_unknown'"},
    )
    unknown = call(base_url, "POST", "/v1/disputes/dp_sbx_unknown/accept", {"request_id": "a", "merchant_id": MERCHANT})
    assert (unknown[0], unknown[1]["error"]) == (404, "dispute_not_found")
    assert call(base_url, "POST", f"{path}/accept", {"request_id": "a", "merchant_id": MERCHANT})[1]["status"] == "lost"
    again = call(base_url, "POST", f"{path}/accept", {"request_id": "b", "merchant_id": MERCHANT})
    assert (again[0], again[1]["error"]) == (409, "dispute_not_open")
