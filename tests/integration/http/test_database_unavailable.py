"""What a client sees while PostgreSQL is away (issue 29, item 1): every route, the API-key
check and the idempotency machinery included, answers 503 `database_unavailable` with
`Retry-After`, never 500; /readyz is 503; the same app serves again once the database is back.
A payment whose processor call was made but whose answer could not be recorded says its
outcome is unknown, is settled by the resolver afterwards, and the client's retry with its key
replays that one result: nothing lost, nothing twice."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.kit.clock import now_us
from paycore.processor.port import ChargeRequest, ChargeResult
from paycore.tenants import service as tenants
from paycore.workers.jobs import WorkerContext, resolve_payments
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import charges
from paycore_sandbox.service import Sandbox
from tests.support import databases
from tests.support.outage import allow_connections, database_away, refuse_connections

pytestmark = pytest.mark.postgres
_keys = itertools.count(1)


class OutageDuringCharge(InProcessTransport):
    """The sandbox, but the database goes away while a charge is at the processor: the charge
    is made, and its answer cannot be recorded."""

    def __init__(self, sandbox: Sandbox, database_url: str) -> None:
        super().__init__(sandbox, timeout_ms=2000)
        self.database_url = database_url
        self.armed = False

    def charge(self, request: ChargeRequest) -> ChargeResult:
        result = super().charge(request)
        if self.armed:
            self.armed = False
            refuse_connections(self.database_url)
        return result


@pytest.fixture
def postgres_url(postgres_databases: databases.PostgresDatabases) -> Iterator[str]:
    with databases.fresh_url("postgres", None, postgres_databases) as url:
        yield url


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}")
    yield box
    box.close()


@pytest.fixture
def setup(postgres_url: str, sandbox: Sandbox) -> Iterator[tuple[TestClient, Database, Settings, OutageDuringCharge]]:
    settings = replace(
        Settings(database_url=postgres_url, db_pool_size=4),
        idempotency_wait_ms=2000,
        processor_timeout_ms=2000,
        processing_stale_ms=1,  # the resolver may take a payment left `processing` at once
        resolver_backoff_ms=1,
        resolver_backoff_max_ms=2,
    )
    database = Database(settings)
    processor = OutageDuringCharge(sandbox, postgres_url)
    with TestClient(create_app(settings, database, processor)) as client:
        yield client, database, settings, processor
    database.dispose()


def account(client: TestClient, headers: dict[str, str]) -> str:
    body = {"code": f"merchant.{next(_keys)}", "currency": "USD", "normal_balance": "credit"}
    reply = client.post("/v1/accounts", json=body, headers=headers)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def requests(destination: str, source: str) -> list[tuple[str, str, Any]]:
    """(method, path, body) of a route of each kind: writes with a key, reads, lists."""
    payment = {
        "amount_minor": 1000,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": destination,
    }
    transfer = {"debit_account_id": source, "credit_account_id": destination, "amount_minor": 5, "currency": "USD"}
    credit = {
        "idempotency_key": f"credit-{next(_keys)}",
        "lines": [{"desc": "x", "amount_minor": 5, "currency": "USD"}],
    }
    return [
        ("POST", "/v1/payments", payment),
        ("POST", "/v1/transfers", transfer),
        ("POST", "/v1/tenants/acme/credits", credit),
        ("GET", f"/v1/accounts/{destination}/balance", None),
        ("GET", "/v1/payments", None),
        ("GET", "/v1/payouts", None),
        ("GET", "/v1/audit_events", None),
        ("GET", "/v1/events", None),
    ]


def assert_unavailable(reply: Any, what: str) -> None:
    assert reply.status_code == 503, (what, reply.status_code, reply.text)
    assert reply.json()["error"] == "database_unavailable", (what, reply.text)
    assert int(reply.headers["retry-after"]) >= 1, what
    assert "commit_outcome" not in reply.json(), what


def test_local_mode_every_route_is_503_database_unavailable_then_serves_again(
    setup: tuple[TestClient, Database, Settings, OutageDuringCharge], postgres_url: str
) -> None:
    client, _database, _settings, _processor = setup
    headers = {"Paycore-Tenant": "acme"}
    destination, source = account(client, headers), account(client, headers)
    with database_away(postgres_url):
        for method, path, body in requests(destination, source):
            sent = {**headers, "Idempotency-Key": f"k-{next(_keys)}"}
            assert_unavailable(client.request(method, path, json=body, headers=sent), f"{method} {path}")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"], ready.text
        assert client.get("/healthz").status_code == 200  # the process itself is fine
        # Off loopback, local mode is refused by a layer outside the app's handlers: it asks
        # the database too.
        outside = TestClient(client.app, base_url="http://192.0.2.10")
        assert_unavailable(outside.get("/v1/payments", headers=headers), "the exposure guard")
    assert client.get("/readyz").status_code == 200
    for method, path, body in requests(destination, source):
        sent = {**headers, "Idempotency-Key": f"k-{next(_keys)}"}
        reply = client.request(method, path, json=body, headers=sent)
        assert reply.status_code in (200, 201), (method, path, reply.text)


def test_with_api_keys_the_key_check_is_503_too(
    setup: tuple[TestClient, Database, Settings, OutageDuringCharge], postgres_url: str
) -> None:
    client, database, _settings, _processor = setup
    api_key = database.transaction(
        lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us())
    ).api_key
    headers = {"Authorization": f"Bearer {api_key}"}
    assert client.get("/v1/payments", headers=headers).status_code == 200
    other_key = database.transaction(lambda connection: tenants.issue_key(connection, "acme", now_us=now_us()))
    with database_away(postgres_url):
        # A key not yet cached: the check itself needs the database.
        reply = client.get("/v1/payments", headers={"Authorization": f"Bearer {other_key}"})
        assert_unavailable(reply, "the API key check")
        reply = client.post("/v1/payments", json={}, headers={**headers, "Idempotency-Key": "bad-body"})
        assert reply.status_code == 400  # a request refused before it needs the database still is
    assert client.get("/v1/payments", headers={"Authorization": f"Bearer {other_key}"}).status_code == 200


def test_a_payment_whose_answer_could_not_be_recorded_is_settled_once(
    setup: tuple[TestClient, Database, Settings, OutageDuringCharge], postgres_url: str, sandbox: Sandbox
) -> None:
    client, database, settings, processor = setup
    headers = {"Paycore-Tenant": "acme"}
    destination = account(client, headers)
    body = {
        "amount_minor": 1234,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": destination,
    }
    keyed = {**headers, "Idempotency-Key": "pay-in-flight"}
    processor.armed = True  # the database goes away while the charge is at the processor
    try:
        reply = client.post("/v1/payments", json=body, headers=keyed)
    finally:
        allow_connections(postgres_url)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"] == "database_unavailable"
    assert reply.json()["commit_outcome"] == "unknown"
    assert reply.headers["retry-after"]
    # Back: the payment is `processing` with the charge made; the client's retry cannot start a
    # second one, and the resolver settles it from the processor's evidence.
    retried = client.post("/v1/payments", json=body, headers=keyed)
    assert retried.status_code in (202, 409), retried.text
    context = WorkerContext.create(database, settings, processor)
    assert resolve_payments(context) == 1
    final = client.post("/v1/payments", json=body, headers=keyed)
    assert final.status_code == 201, final.text
    assert final.json()["status"] == "succeeded"
    again = client.post("/v1/payments", json=body, headers=keyed)
    assert (again.status_code, again.json()["id"]) == (201, final.json()["id"])
    listed = client.get("/v1/payments", headers=headers).json()["data"]
    assert [payment["id"] for payment in listed] == [final.json()["id"]]
    with sandbox.database.read() as connection:
        assert connection.execute(select(func.count()).select_from(charges)).scalar_one() == 1
    balance = client.get(f"/v1/accounts/{destination}/balance", headers=headers).json()
    assert balance["posted_minor"] == 1234
