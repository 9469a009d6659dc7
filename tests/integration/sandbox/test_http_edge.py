"""Issue 29, the sandbox's side: its JSON bodies are read by paycore's strict reader (a repeated
key is 400 `duplicate_json_key` and nothing is stored), and paycore's `Server` serves its app
off loopback only when the app has an admin token (`state.admin_token`)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from paycore.http.exposure import UnsafeBind
from paycore.http.server import Server
from paycore_sandbox import Sandbox
from paycore_sandbox.http import create_app
from tests.integration.sandbox.conftest import RecordingSink, StartServer, count
from tests.integration.sandbox.test_http_api import call
from tests.support.raw_http import connect

TOKEN = "sbx_admin_0123456789abcdef"


@pytest.fixture
def base_url(sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer) -> str:
    return serve_sandbox(sandbox, sink)


@pytest.mark.parametrize(
    ("path", "raw", "param"),
    [
        (
            "/v1/charges",
            b'{"request_id": "pay_1", "merchant_id": "m", "amount_minor": 100, "currency": "USD",'
            b' "token": "tok_ok", "amount_minor": 999999}',
            "amount_minor",
        ),
        (
            "/v1/payouts",
            b'{"request_id": "po_1", "merchant_id": "m", "amount_minor": 100, "currency": "USD", "rail": "ach",'
            b' "beneficiary_name": "Ada", "routing_number": "110000000", "account_number": "000123456789",'
            b' "account_number": "000333333335"}',
            "account_number",
        ),
    ],
)
def test_a_request_that_repeats_a_key_is_refused_and_stores_nothing(
    base_url: str, sandbox: Sandbox, path: str, raw: bytes, param: str
) -> None:
    status, body = call(base_url, "POST", path, raw=raw)

    assert (status, body["error"], body["param"]) == (400, "duplicate_json_key", param)
    assert count(sandbox, "charges") == 0
    assert sandbox.get_payout("po_1") is None


def test_a_fault_plan_that_repeats_a_key_is_refused_and_the_old_one_stays(base_url: str) -> None:
    """The plan carries the report faults too: which of two deltas would the report apply?"""
    plan: dict[str, Any] = {"rules": [{"fault": "report_amount_delta", "amount_delta_minor": 1, "next_n": 1}]}
    assert call(base_url, "PUT", "/v1/sandbox/faults", plan)[0] == 200
    raw = (
        b'{"rules": [{"fault": "report_amount_delta", "amount_delta_minor": 1, "next_n": 1,'
        b' "amount_delta_minor": -1000000}]}'
    )

    status, body = call(base_url, "PUT", "/v1/sandbox/faults", raw=raw)

    assert (status, body["error"], body["param"]) == (400, "duplicate_json_key", "rules[0].amount_delta_minor")
    assert call(base_url, "GET", "/v1/sandbox/faults")[1]["rules"][0]["amount_delta_minor"] == 1


def test_server_serves_the_sandbox_off_loopback_only_with_an_admin_token(sandbox: Sandbox) -> None:
    with pytest.raises(UnsafeBind) as refused:
        Server(create_app(sandbox), "0.0.0.0", 0)
    assert refused.value.reason == "no_admin_token"

    server = Server(create_app(sandbox, admin_token=TOKEN), "0.0.0.0", 0)
    server.server_close()


def test_a_client_that_hangs_up_mid_body_is_one_info_line_not_an_error(
    base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared answer to a client gone before its body was read (paycore.http.routing)."""
    caplog.set_level(logging.INFO)
    port = int(base_url.rsplit(":", 1)[1])
    with connect(port) as sock:
        sock.sendall(
            b"POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n0123456789"
        )
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _events(caplog, "client_disconnected"):
        time.sleep(0.02)
    time.sleep(0.2)  # anything logged after the answer
    [line] = _events(caplog, "client_disconnected")
    assert (line.levelno, getattr(line, "route", None)) == (logging.INFO, "/v1/charges")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == event]
