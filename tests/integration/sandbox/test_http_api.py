"""The sandbox's own HTTP surface: fault plan endpoints, the deliver pump, error bodies."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

import pytest

from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ChargeRequest, ProcessorUnreachable
from paycore_sandbox import Sandbox
from tests.integration.sandbox.conftest import HOLD_MS, RecordingSink, StartServer


@pytest.fixture
def base_url(sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer) -> str:
    return serve_sandbox(sandbox, sink)


def call(base_url: str, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        kind = response.getheader("Content-Type") or ""
        return response.status, json.loads(payload) if kind.startswith("application/json") else payload.decode()
    finally:
        connection.close()


def test_the_fault_plan_is_set_read_and_cleared(base_url: str) -> None:
    plan = {"seed": 3, "hold_ms": 20, "rules": [{"fault": "error_500", "next_n": 2, "ops": ["charge"]}]}

    status, body = call(base_url, "PUT", "/v1/sandbox/faults", plan)
    assert status == 200 and body["active"] is True and body["rules"][0]["remaining"] == 2
    assert call(base_url, "GET", "/v1/sandbox/faults")[1] == body

    transport = HttpTransport(base_url, timeout_ms=2_000)
    with pytest.raises(ProcessorUnreachable):
        transport.charge(ChargeRequest("pay_1", "merchant_1", 100, "USD", "tok_ok"))
    assert call(base_url, "GET", "/v1/sandbox/faults")[1]["rules"][0]["remaining"] == 1

    status, body = call(base_url, "DELETE", "/v1/sandbox/faults")
    assert status == 200 and body["active"] is False and body["rules"] == []
    assert transport.charge(ChargeRequest("pay_1", "merchant_1", 100, "USD", "tok_ok")).status == "succeeded"


def test_an_invalid_plan_is_refused_and_the_old_one_stays(base_url: str) -> None:
    call(base_url, "PUT", "/v1/sandbox/faults", {"rules": [{"fault": "error_500", "percent": 10}]})

    status, body = call(base_url, "PUT", "/v1/sandbox/faults", {"rules": [{"fault": "error_500", "percent": 10.0}]})

    assert status == 400 and body["error"] == "invalid_fault_plan" and "percent" in body["message"]
    assert call(base_url, "GET", "/v1/sandbox/faults")[1]["rules"][0]["percent"] == 10


def test_a_dropped_answer_is_held_then_answered_504(base_url: str) -> None:
    call(base_url, "PUT", "/v1/sandbox/faults", {"rules": [{"fault": "drop_response", "next_n": 1}]})
    started = time.monotonic()

    status, body = call(
        base_url,
        "POST",
        "/v1/charges",
        {"request_id": "pay_1", "merchant_id": "m", "amount_minor": 100, "currency": "USD", "token": "tok_ok"},
    )

    assert (status, body["error"]) == (504, "gateway_timeout")
    assert (time.monotonic() - started) * 1000 >= HOLD_MS
    assert call(base_url, "GET", "/v1/charges/pay_1")[1]["status"] == "succeeded"


def test_error_500_is_answered_500(base_url: str) -> None:
    call(base_url, "PUT", "/v1/sandbox/faults", {"rules": [{"fault": "error_500", "next_n": 1}]})

    status, body = call(base_url, "GET", "/v1/refunds/rf_1")
    assert status == 404, "the plan lists charge and refund only by default"
    status, body = call(
        base_url,
        "POST",
        "/v1/refunds",
        {"request_id": "rf_1", "merchant_id": "m", "payment_reference": "ch_x", "amount_minor": 1, "currency": "USD"},
    )
    assert (status, body["error"]) == (500, "internal_error")


def test_the_deliver_pump_settles_and_delivers(base_url: str, sink: RecordingSink) -> None:
    HttpTransport(base_url).charge(ChargeRequest("pay_1", "merchant_1", 100, "USD", "tok_ok"))

    assert call(base_url, "POST", "/v1/sandbox/webhooks/deliver") == (200, {"settled": 0, "delivered": 1})
    assert len(sink.received) == 1


@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "code"),
    [
        ("POST", "/v1/charges", b"{not json", 400, "invalid_request"),
        ("POST", "/v1/charges", b'{"request_id": "x", "amount_minor": "100"}', 400, "invalid_amount"),
        ("POST", "/v1/charges", b'{"request_id": "x", "surprise": 1}', 400, "invalid_request"),
        ("GET", "/v1/nothing-here", None, 404, "not_found"),
        ("DELETE", "/v1/charges/x", None, 405, "method_not_allowed"),
        ("GET", "/v1/settlements/2024-99-01.csv", None, 400, "invalid_day"),
        ("PUT", "/v1/sandbox/faults", b"[1, 2]", 400, "invalid_request"),
    ],
)
def test_errors_are_json_with_a_code(base_url: str, method: str, path: str, raw: bytes, status: int, code: str) -> None:
    answered, body = call(base_url, method, path, raw=raw)

    assert (answered, body["error"]) == (status, code)
    assert isinstance(body["message"], str)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/charges/x", "GET"),
        ("PATCH", "/v1/sandbox/faults", "DELETE, GET, PUT"),
        ("GET", "/v1/charges", "POST"),
    ],
)
def test_a_405_names_the_methods_the_path_serves(base_url: str, method: str, path: str, allow: str) -> None:
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        response.read()
        assert (response.status, response.getheader("Allow")) == (405, allow)
    finally:
        connection.close()


def test_the_settlement_csv_and_health(base_url: str) -> None:
    status, body = call(base_url, "GET", "/v1/settlements/2001-01-01.csv")

    assert status == 200 and body.startswith("type,request_id,processor_id,")
    assert call(base_url, "GET", "/healthz") == (200, {"status": "ok"})


def test_an_unreachable_processor_is_unreachable() -> None:
    transport = HttpTransport("http://127.0.0.1:9", timeout_ms=500)

    with pytest.raises(ProcessorUnreachable):
        transport.get_charge("pay_1")
    with pytest.raises(ProcessorUnreachable):
        transport.settlement_report("2024-01-01")


def test_an_unexpected_failure_is_a_json_500_and_unreachable(
    base_url: str, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(request_id: str) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(sandbox, "get_charge", broken)

    status, body = call(base_url, "GET", "/v1/charges/pay_1")
    assert (status, body["error"]) == (500, "internal_error")
    with pytest.raises(ProcessorUnreachable):
        HttpTransport(base_url).get_charge("pay_1")


def test_a_trailing_slash_is_a_404_never_a_redirect(base_url: str) -> None:
    """Issue 18: no redirect built from the request's Host header, in the sandbox as in paycore."""
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        connection.request("GET", "/v1/sandbox/faults/", headers={"Host": "evil.example"})
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 404 and response.getheader("Location") is None
    assert body["error"] == "not_found"
