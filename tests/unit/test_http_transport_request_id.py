"""The request id goes to the processor as `X-Request-Id` (issue 18 point 4), and a call with
no answer is a `processor_no_answer` line that carries ids but never the request's fields."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from paycore.kit import logs
from paycore.payouts import processor_calls as payout_calls
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ChargeRequest, PayoutRequest

ANSWER = {
    "request_id": "pay_1",
    "status": "succeeded",
    "processor_charge_id": "ch_1",
    "amount_minor": 100,
    "currency": "USD",
    "failure_code": None,
}


@pytest.fixture
def processor() -> Iterator[tuple[str, list[str | None]]]:
    received: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.headers.get("X-Request-Id"))
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}", received
    server.shutdown()
    server.server_close()


def charge() -> ChargeRequest:
    return ChargeRequest(
        request_id="pay_1", merchant_id="acme", amount_minor=100, currency="USD", token="tok_ok", description=None
    )


def test_the_request_id_is_sent_to_the_processor(processor: tuple[str, list[str | None]]) -> None:
    url, received = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    token = logs.set_request_id("req_abc")
    try:
        assert transport.charge(charge()).status == "succeeded"
    finally:
        logs.reset_request_id(token)
    assert transport.charge(charge()).status == "succeeded"  # outside a request: no header
    assert received == ["req_abc", None]


def test_a_payout_call_with_no_answer_is_a_line_without_the_account(caplog: pytest.LogCaptureFixture) -> None:
    transport = HttpTransport("http://127.0.0.1:9", timeout_ms=200)  # discard port: refused
    request = PayoutRequest(
        request_id="po_1",
        merchant_id="acme",
        amount_minor=1000,
        currency="EUR",
        rail="sepa",
        beneficiary_name="Emilie",
        iban="DE89370400440532013000",
        bic=None,
        routing_number=None,
        account_number=None,
    )
    caplog.set_level(logging.INFO)
    call = payout_calls.send(transport, request)
    assert call.kind == "unreachable"
    [line] = [record for record in caplog.records if getattr(record, "event", None) == "processor_no_answer"]
    assert (line.operation, line.payout_id, line.tenant_id) == ("send_payout", "po_1", "acme")  # type: ignore[attr-defined]
    assert line.error_type == "ProcessorUnreachable"  # type: ignore[attr-defined]
    formatted = logs.JsonFormatter().format(line)
    assert "DE89370400440532013000" not in formatted and "Emilie" not in formatted
