"""Issue 29 point 3: a JSON body that repeats a key within one object, at any depth, is refused
with 400 `duplicate_json_key` naming the key's path, and nothing is stored: on every route that
reads a body (each would otherwise act on the last value), on both databases. The processor's
answers are read the same way: one that repeats a key is no answer (the payment stays in doubt).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from paycore.db.engine import Database
from paycore.http.routing import JsonRoute, assert_json_routes
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ChargeRequest, ProcessorUnreachable
from paycore.tables import metadata

WEBHOOK_SECRET = "whsec_sandbox_dev"  # the default of the `settings` fixture
JSON = {"Content-Type": "application/json"}


def row_counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in metadata.tables.items()
        }


def account(client: TestClient, code: str) -> str:
    body = {"code": code, "currency": "USD", "normal_balance": "credit"}
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.fixture
def funded(client: TestClient) -> tuple[str, str]:
    """Two accounts of the default tenant, the first holding 1,000,000 minor units."""
    source, funding = account(client, "source"), account(client, "funding")
    body = {"debit_account_id": funding, "credit_account_id": source, "amount_minor": 1_000_000, "currency": "USD"}
    response = client.post("/v1/transfers", json=body, headers={"Idempotency-Key": "fund"})
    assert response.status_code == 201, response.text
    return source, funding


def signed_webhook(body: bytes) -> dict[str, str]:
    return {**JSON, SIGNATURE_HEADER: sign(WEBHOOK_SECRET, int(time.time()), body)}


def cases(source: str, other: str) -> list[tuple[str, str, str, dict[str, str], str]]:
    """(method, path, body, headers, param): a body each route would otherwise take, with one
    key repeated; the repeat is the value a client in front of paycore would not have seen."""
    key = {**JSON, "Idempotency-Key": "dup-1"}
    line = '{"desc": "bonus", "amount_minor": 1, "currency": "USD", "amount_minor": 999999}'
    webhook = (
        '{"id": "evt_dup", "type": "charge.succeeded", "created_at": "2026-01-01T00:00:00Z", "sequence": 1,'
        ' "data": {"object": "charge", "request_id": "pay_x", "merchant_id": "default", "status": "succeeded",'
        ' "amount_minor": 1, "currency": "USD", "amount_minor": 999999}}'
    )
    beneficiary = '{"name": "Ada", "routing_number": "110000000", "account_number": "000123456789"'
    return [
        (
            "POST",
            "/v1/tenants/acme/credits",
            f'{{"idempotency_key": "k1", "lines": [{line}]}}',
            JSON,
            "lines[0].amount_minor",
        ),
        (
            "POST",
            "/v1/accounts",
            '{"code": "a", "currency": "USD", "normal_balance": "credit", "code": "b"}',
            JSON,
            "code",
        ),
        (
            "POST",
            "/v1/transfers",
            f'{{"debit_account_id": "{other}", "credit_account_id": "{source}", "amount_minor": 1,'
            f' "currency": "USD", "credit_account_id": "{other}"}}',
            key,
            "credit_account_id",
        ),
        (
            "POST",
            "/v1/transfers/batch",
            f'{{"transfers": [{{"debit_account_id": "{other}", "credit_account_id": "{source}",'
            f' "amount_minor": 1, "currency": "USD", "amount_minor": 999999}}]}}',
            key,
            "transfers[0].amount_minor",
        ),
        (
            "POST",
            "/v1/payments",
            f'{{"amount_minor": 1, "currency": "USD", "source": {{"type": "card", "token": "tok_ok",'
            f' "token": "tok_declined"}}, "destination_account": "{source}"}}',
            key,
            "source.token",
        ),
        (
            "POST",
            "/v1/payouts",
            f'{{"amount_minor": 1, "currency": "USD", "source_account": "{source}", "rail": "ach",'
            f' "beneficiary": {beneficiary}, "account_number": "000333333335"}}}}',
            key,
            "beneficiary.account_number",
        ),
        (
            "POST",
            "/v1/webhook_endpoints",
            '{"url": "https://hooks.example.com/a", "events": ["*"], "url": "https://evil.example/b"}',
            key,
            "url",
        ),
        (
            "PUT",
            "/v1/settings",
            '{"refund_approval_threshold_minor": 1, "refund_approval_threshold_minor": null}',
            JSON,
            "refund_approval_threshold_minor",
        ),
        ("POST", "/v1/webhooks/processor", webhook, signed_webhook(webhook.encode()), "data.amount_minor"),
        # Refused before the route looks for the object, as malformed JSON is.
        ("POST", "/v1/payments/pay_none/refunds", '{"amount_minor": 1, "amount_minor": 2}', key, "amount_minor"),
        (
            "POST",
            "/v1/reconciliation/breaks/brk_none/resolve",
            '{"resolution": "accepted", "resolution": "written_off"}',
            key,
            "resolution",
        ),
    ]


def test_every_route_refuses_a_repeated_key_and_stores_nothing(
    client: TestClient, database: Database, funded: tuple[str, str]
) -> None:
    before = row_counts(database)
    for method, path, body, headers, param in cases(*funded):
        response = client.request(method, path, content=body.encode(), headers=headers)
        assert response.status_code == 400, (path, response.text)
        answer = response.json()
        assert answer["error"] == "duplicate_json_key", (path, answer)
        assert answer["param"] == param and answer["message"].startswith(f"{param}: "), (path, answer)
    assert row_counts(database) == before


def test_the_same_bodies_without_the_repeat_are_taken(client: TestClient, database: Database) -> None:
    """The control: the check refuses the repeat, not the request."""
    body = '{"idempotency_key": "k1", "lines": [{"desc": "bonus", "amount_minor": 1, "currency": "USD"}]}'
    assert client.post("/v1/tenants/acme/credits", content=body.encode(), headers=JSON).status_code == 201
    assert (
        client.post(
            "/v1/accounts", content=b'{"code": "a", "currency": "USD", "normal_balance": "credit"}', headers=JSON
        ).status_code
        == 201
    )


def test_a_key_repeated_with_the_same_value_is_refused_too(client: TestClient) -> None:
    body = b'{"code": "a", "code": "a", "currency": "USD", "normal_balance": "credit"}'
    response = client.post("/v1/accounts", content=body, headers=JSON)
    assert response.status_code == 400 and response.json()["error"] == "duplicate_json_key"


def test_malformed_json_is_still_invalid_json(client: TestClient) -> None:
    response = client.post("/v1/accounts", content=b'{"code": "a", "code"', headers=JSON)
    assert response.status_code == 400 and response.json()["error"] == "invalid_json"


def test_a_webhook_is_refused_for_its_signature_before_its_keys(client: TestClient, database: Database) -> None:
    """The signature is checked before the body is parsed (docs/errors.md)."""
    before = row_counts(database)
    body = b'{"id": "evt_1", "id": "evt_2"}'
    response = client.post("/v1/webhooks/processor", content=body, headers={**JSON, SIGNATURE_HEADER: "t=1,v1=00"})
    assert response.status_code == 400 and response.json()["error"] != "duplicate_json_key"
    assert row_counts(database) == before


def test_an_app_with_a_route_not_made_by_json_route_is_refused() -> None:
    """What keeps every route behind the strict reader: `create_app` asserts it."""
    loose = APIRouter()

    @loose.post("/loose")
    def take(body: dict[str, Any]) -> dict[str, Any]:
        return body

    app = FastAPI()
    app.include_router(APIRouter(route_class=JsonRoute))
    app.include_router(loose)
    with pytest.raises(AssertionError, match="/loose"):
        assert_json_routes(app)


# ---------------------------------------------------------------------------- the processor's answers


class _RepeatingProcessor(http.server.BaseHTTPRequestHandler):
    """Answers every charge `succeeded` for 100, then, in the same object, `failed`."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = (
            b'{"request_id": "pay_1", "status": "succeeded", "processor_charge_id": "ch_1", "amount_minor": 100,'
            b' "currency": "USD", "failure_code": null, "status": "failed"}'
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def repeating_processor() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RepeatingProcessor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_processor_answer_that_repeats_a_key_is_no_answer(repeating_processor: str) -> None:
    """Neither `succeeded` nor `failed` is guessed: the call is in doubt, and asked again later."""
    with pytest.raises(ProcessorUnreachable, match="no usable answer"):
        HttpTransport(repeating_processor, timeout_ms=5_000).charge(
            ChargeRequest("pay_1", "acme", 100, "USD", "tok_ok")
        )
