"""Webhooks to paycore: signed over the exact bytes, at least once, retried with bounded
backoff, every attempt recorded; delivered by a sink (in memory here, HTTP at the end)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from paycore.kit import clock
from paycore.kit.signing import SIGNATURE_HEADER, verify
from paycore.processor.port import ChargeRequest, RefundRequest
from paycore_sandbox import Sandbox, SandboxSettings, http_sink
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import webhook_attempts, webhooks
from tests.integration.sandbox.conftest import HOUR_US, SECRET, SETTINGS, Harness, RecordingSink

CHARGE = ChargeRequest("pay_1", "merchant_1", 1_999, "GBP", "tok_ok")


def outbox(sandbox: Sandbox) -> list[dict[str, object]]:
    with sandbox.database.read() as connection:
        return [dict(row) for row in connection.execute(select(webhooks)).mappings()]


def attempts(sandbox: Sandbox) -> list[dict[str, object]]:
    statement = select(webhook_attempts).order_by(webhook_attempts.c.attempt)
    with sandbox.database.read() as connection:
        return [dict(row) for row in connection.execute(statement).mappings()]


def test_events_are_signed_over_the_exact_bytes_and_carry_the_object(harness: Harness) -> None:
    charged = harness.processor.charge(CHARGE)
    harness.processor.refund(RefundRequest("rf_1", "merchant_1", charged.processor_charge_id, 999, "GBP"))

    assert harness.sandbox.deliver_due(harness.sink) == 2

    for body, headers in harness.sink.received:
        assert headers["Content-Type"] == "application/json"
        signed_at_s = verify(SECRET, headers[SIGNATURE_HEADER], body, now_s=int(time.time()))
        assert abs(signed_at_s - time.time()) < 60
    charge_event, refund_event = harness.sink.events()
    assert charge_event["type"] == "charge.succeeded" and charge_event["sequence"] == 1
    assert charge_event["data"] == {
        "object": "charge",
        "request_id": "pay_1",
        "merchant_id": "merchant_1",
        "processor_charge_id": charged.processor_charge_id,
        "status": "succeeded",
        "amount_minor": 1_999,
        "currency": "GBP",
        "failure_code": None,
    }
    assert clock.parse_rfc3339(charge_event["created_at"]) > 0
    assert refund_event["type"] == "refund.succeeded"
    assert refund_event["data"]["payment_reference"] == charged.processor_charge_id
    assert set(refund_event["data"]) == {
        "object",
        "request_id",
        "merchant_id",
        "processor_refund_id",
        "payment_reference",
        "status",
        "amount_minor",
        "currency",
        "failure_code",
    }
    assert harness.sandbox.deliver_due(harness.sink) == 0, "delivered once is delivered"


def test_a_failing_receiver_is_retried_with_backoff_until_attempts_max(sandbox: Sandbox) -> None:
    sandbox.charge(CHARGE)
    failing = RecordingSink(status=500)
    now_us = clock.now_us()

    assert sandbox.deliver_due(failing, now_us) == 0
    assert sandbox.deliver_due(failing, now_us) == 0 and len(failing.received) == 1, "not due again yet"
    for _ in range(SETTINGS.webhook_attempts_max + 2):
        now_us += HOUR_US
        sandbox.deliver_due(failing, now_us)

    assert len(failing.received) == SETTINGS.webhook_attempts_max
    assert [row["http_status"] for row in attempts(sandbox)] == [500] * SETTINGS.webhook_attempts_max
    (row,) = outbox(sandbox)
    assert (row["state"], row["attempts"]) == ("dead", SETTINGS.webhook_attempts_max)


def test_a_receiver_that_cannot_be_reached_is_recorded_then_delivered_later(sandbox: Sandbox) -> None:
    sandbox.charge(CHARGE)

    def refused(body: bytes, headers: dict[str, str]) -> int:
        raise ConnectionRefusedError("connection refused")

    assert sandbox.deliver_due(refused) == 0
    working = RecordingSink()
    assert sandbox.deliver_due(working, clock.now_us() + HOUR_US) == 1

    first, second = attempts(sandbox)
    assert first["http_status"] is None and "ConnectionRefusedError" in str(first["error"])
    assert (second["http_status"], second["error"]) == (200, None)
    assert outbox(sandbox)[0]["state"] == "delivered"


def test_backoff_grows_with_jitter_and_is_capped(sandbox: Sandbox) -> None:
    first_ms, cap_ms = SETTINGS.webhook_backoff_ms_first, SETTINGS.webhook_backoff_ms_max
    for attempt in range(1, 40):
        expected_ms = min(cap_ms, first_ms * 2 ** (attempt - 1))
        delays = {sandbox.webhook_backoff_ms(attempt) for _ in range(20)}
        assert all(expected_ms // 2 <= delay <= expected_ms for delay in delays)
        assert all(type(delay) is int for delay in delays)


def test_the_background_loop_settles_and_delivers(sandbox: Sandbox) -> None:
    sandbox.set_fault_plan({"settle_late_ms": 0, "rules": [{"fault": "settle_late", "next_n": 1}]})
    sink = RecordingSink()
    InProcessTransport(sandbox).charge(CHARGE)  # the transport applies the plan

    background = sandbox.start_background(sink, interval_ms=10)
    try:
        deadline = time.monotonic() + 5
        while len(sink.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        background.stop()

    assert not background.thread.is_alive()
    assert sorted(event["type"] for event in sink.events()) == ["charge.pending", "charge.succeeded"]


class Receiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[bytes, dict[str, str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((body, dict(self.headers)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver_url() -> Iterator[str]:
    Receiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/webhooks/processor"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_the_http_sink_posts_signed_events(sandbox: Sandbox, receiver_url: str) -> None:
    sandbox.charge(CHARGE)

    assert sandbox.deliver_due(http_sink(receiver_url, timeout_ms=2_000)) == 1

    ((body, headers),) = Receiver.received
    assert verify(SECRET, headers[SIGNATURE_HEADER], body, now_s=int(time.time())) > 0
    assert headers["Content-Type"] == "application/json"


def test_the_http_sink_to_nowhere_is_a_failed_attempt(tmp_path: Path) -> None:
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 's.db'}", settings=SandboxSettings(webhook_attempts_max=1))
    try:
        sandbox.charge(CHARGE)
        assert sandbox.deliver_due(http_sink("http://127.0.0.1:9/nowhere", timeout_ms=500)) == 0
        (attempt,) = attempts(sandbox)
        assert attempt["http_status"] is None and attempt["error"]
        assert outbox(sandbox)[0]["state"] == "dead"
    finally:
        sandbox.close()


def test_http_sink_refuses_a_url_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="webhook url"):
        http_sink("ftp://example.com/hook")
