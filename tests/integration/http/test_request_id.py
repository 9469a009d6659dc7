"""The request id and the access line (SPEC §12): a well-formed incoming `X-Request-Id` is
kept, anything else is replaced (never echoed), one is made when absent, and every answer
carries it, errors included; one `http_request` line per request with the six keys."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.kit import logs

GENERATED = re.compile(r"req_[0-9A-HJKMNP-TV-Z]{26}")
ACCESS_KEYS = {"request_id", "tenant_id", "method", "route", "status", "latency_ms"}


@pytest.fixture
def boom_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    """The API with one extra route that fails unexpectedly (a 500 from Starlette's layer)."""
    app = create_app(settings, database)

    def boom() -> None:
        raise RuntimeError("unexpected")

    app.add_api_route("/boom", boom)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == "http_request"]


@pytest.mark.parametrize("incoming", ["abc", "A.b_c:d-1", "x" * 128, "0f8fad5b-d9cb-469f-a165-70867728950e"])
def test_a_well_formed_request_id_is_echoed(client: TestClient, incoming: str) -> None:
    response = client.get("/healthz", headers={"X-Request-Id": incoming})
    assert response.headers["x-request-id"] == incoming


@pytest.mark.parametrize("incoming", ["", "x" * 129, "a b", "a/b", "<script>", "é", "a\tb", "a,b"])
def test_a_malformed_request_id_is_replaced_never_echoed(client: TestClient, incoming: str) -> None:
    response = client.get("/healthz", headers={b"X-Request-Id": incoming.encode("utf-8")})
    returned = response.headers["x-request-id"]
    assert GENERATED.fullmatch(returned), returned
    assert incoming not in returned or incoming == ""


def test_a_request_id_is_made_when_none_is_sent(client: TestClient) -> None:
    first = client.get("/healthz").headers["x-request-id"]
    second = client.get("/healthz").headers["x-request-id"]
    assert GENERATED.fullmatch(first) and GENERATED.fullmatch(second) and first != second


def test_every_error_answer_carries_the_request_id(client: TestClient) -> None:
    answers = [
        client.get("/v1/nowhere", headers={"X-Request-Id": "r404"}),
        client.delete("/healthz", headers={"X-Request-Id": "r405"}),
        client.post(
            "/v1/tenants/default/credits",
            content=b"x" * (Settings().body_bytes_max + 1),
            headers={"X-Request-Id": "r413", "Content-Type": "application/json"},
        ),
        client.post(
            "/v1/tenants/default/credits",
            content=b"a=b",
            headers={"X-Request-Id": "r415", "Content-Type": "text/plain"},
        ),
        client.post("/v1/tenants/default/credits", content=b"{", headers={"X-Request-Id": "r400"}),
    ]
    assert [answer.status_code for answer in answers] == [404, 405, 413, 415, 400]
    assert [answer.headers["x-request-id"] for answer in answers] == ["r404", "r405", "r413", "r415", "r400"]


def test_an_unexpected_error_is_a_500_with_the_request_id_and_a_line(
    boom_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())  # formats when the line is written, as in a server
    logging.getLogger("paycore.http.errors").addHandler(handler)
    try:
        response = boom_client.get("/boom", headers={"X-Request-Id": "r500"})
    finally:
        logging.getLogger("paycore.http.errors").removeHandler(handler)
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "r500"
    [line] = access_lines(caplog)
    assert (line.status, line.route, line.request_id) == (500, "/boom", "r500")  # type: ignore[attr-defined]
    [unhandled] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert (unhandled["event"], unhandled["request_id"], unhandled["exc_type"]) == (
        "unhandled_error",
        "r500",
        "RuntimeError",
    )


def test_one_access_line_per_request_with_the_route_template(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    created = client.post(
        "/v1/tenants/acme/credits",
        json={"idempotency_key": "k1", "lines": [{"desc": "top-up", "amount_minor": 500, "currency": "USD"}]},
        headers={"X-Request-Id": "credit-1"},
    )
    missing = client.get("/v1/payments/pay_nothing", headers={"X-Request-Id": "missing-1", "Paycore-Tenant": "acme"})
    unrouted = client.get("/v1/nowhere/at/all")
    assert created.status_code == 201, created.text
    assert missing.status_code == 404
    lines = access_lines(caplog)
    assert len(lines) == 3
    for line in lines:
        assert set(vars(line)) >= ACCESS_KEYS
        assert isinstance(line.latency_ms, int)  # type: ignore[attr-defined]
    first, second, third = ({key: getattr(line, key) for key in ACCESS_KEYS - {"latency_ms"}} for line in lines)
    assert first == {
        "request_id": "credit-1",
        "tenant_id": "acme",
        "method": "POST",
        "route": "/v1/tenants/{tenant_id}/credits",
        "status": 201,
    }
    assert second == {
        "request_id": "missing-1",
        "tenant_id": "acme",
        "method": "GET",
        "route": "/v1/payments/{payment_id}",
        "status": 404,
    }
    assert third["route"] == "unmatched" and third["tenant_id"] is None and third["status"] == 404
    assert third["request_id"] == unrouted.headers["x-request-id"]
