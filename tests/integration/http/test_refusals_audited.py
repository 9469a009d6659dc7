"""Every refused money request is in the audit log, findable by its idempotency key (issue
29, item 9): a business refusal, a request that failed validation, a refusal the idempotency
layer recorded and one raised before it, on every money-moving POST, each found by
`GET /v1/audit_events?idempotency_key=...` as one `api.<operation>` event with outcome
`refused`. A replay of a refusal is not recorded again; a success is no refusal."""

from __future__ import annotations

import itertools
from typing import Any

from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.refusals import AUDITED_ROUTES
from tests.support.payouts import funded_source

_numbers = itertools.count(1)
ACH = {"name": "Ada Lovelace", "routing_number": "110000000", "account_number": "000123456789"}
NOBODY = "acc_01NOSUCHACCOUNT0000000000"


def refused_requests(source: str) -> list[tuple[str, str, Any, int]]:
    """(operation, path, body, status) of a refused request on each money-moving route."""
    transfer = {"debit_account_id": source, "credit_account_id": NOBODY, "amount_minor": 5, "currency": "USD"}
    payout = {
        "amount_minor": 10_000_000,
        "currency": "USD",
        "source_account": source,
        "beneficiary": ACH,
        "rail": "ach",
    }
    payment = {
        "amount_minor": 100,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": NOBODY,
    }
    return [
        (
            "credits.create",
            "/v1/tenants/default/credits",
            {"lines": [{"desc": "x", "amount_minor": 0, "currency": "USD"}]},
            400,
        ),
        ("transfers.create", "/v1/transfers", transfer, 404),
        ("transfers.create", "/v1/transfers", {**transfer, "amount_minor": 0}, 400),
        ("transfers.batch", "/v1/transfers/batch", {"transfers": []}, 400),
        ("transfers.batch", "/v1/transfers/batch", {"transfers": [transfer]}, 404),
        ("transfers.post", "/v1/transfers/txn_01NOSUCH/post", None, 404),
        ("transfers.void", "/v1/transfers/txn_01NOSUCH/void", None, 404),
        ("transfers.reverse", "/v1/transfers/txn_01NOSUCH/reverse", None, 404),
        ("payments.create", "/v1/payments", payment, 404),
        ("payments.create", "/v1/payments", {**payment, "currency": "XXX"}, 400),
        ("refunds.create", "/v1/payments/pay_01NOSUCH/refunds", {"amount_minor": 1}, 404),
        ("refunds.approve", "/v1/refunds/rfd_01NOSUCH/approve", None, 404),
        ("refunds.cancel", "/v1/refunds/rfd_01NOSUCH/cancel", None, 404),
        ("payouts.schedule", "/v1/payouts", payout, 422),
        ("payouts.schedule", "/v1/payouts", {**payout, "rail": "wire"}, 400),
        ("payouts.cancel", "/v1/payouts/po_01NOSUCH/cancel", None, 404),
        ("payouts.adjust", "/v1/payouts/po_01NOSUCH/adjustments", {"kind": "chargeback", "amount_minor": 1}, 404),
    ]


def send(client: TestClient, path: str, body: Any, key: str) -> Any:
    if path.endswith("/credits"):  # the credit's key travels in its body
        return client.post(path, json={**body, "idempotency_key": key})
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def audited(client: TestClient, key: str) -> list[dict[str, Any]]:
    reply = client.get("/v1/audit_events", params={"idempotency_key": key, "limit": 100})
    assert reply.status_code == 200, reply.text
    return list(reply.json()["data"])


def test_every_money_route_is_covered(settings: Settings, database: Database) -> None:
    app = create_app(settings, database)
    posts = {path for path, operations in app.openapi()["paths"].items() if "post" in operations}
    assert set(AUDITED_ROUTES) <= posts, set(AUDITED_ROUTES) - posts
    assert {operation for operation, *_ in refused_requests("acc_x")} == set(AUDITED_ROUTES.values())


def test_every_refused_money_request_is_found_by_its_idempotency_key(client: TestClient, database: Database) -> None:
    source = funded_source(database, "default", 500)
    for operation, path, body, status in refused_requests(source):
        key = f"refused-{operation}-{next(_numbers)}"
        reply = send(client, path, body, key)
        assert reply.status_code == status, (path, reply.text)
        found = audited(client, key)
        assert len(found) == 1, (path, found)
        [event] = found
        assert (event["type"], event["outcome"], event["object_type"], event["actor"]) == (
            f"api.{operation}",
            "refused",
            "request",
            "local",
        ), event
        assert event["data"]["status"] == status, event
        assert event["data"]["error"] == reply.json()["error"], event
        assert event["data"]["idempotency_key"] == key, event


def test_a_replayed_refusal_is_recorded_once_and_a_success_never(client: TestClient, database: Database) -> None:
    source = funded_source(database, "default", 500)
    payout = {
        "amount_minor": 10_000_000,
        "currency": "USD",
        "source_account": source,
        "beneficiary": ACH,
        "rail": "ach",
    }
    first = send(client, "/v1/payouts", payout, "again-1")
    second = send(client, "/v1/payouts", payout, "again-1")
    assert (first.status_code, second.status_code) == (422, 422)
    assert second.headers.get("idempotent-replayed") == "true"
    assert len(audited(client, "again-1")) == 1
    fine = send(client, "/v1/payouts", {**payout, "amount_minor": 100}, "fine-1")
    assert fine.status_code == 201, fine.text
    assert [event["outcome"] for event in audited(client, "fine-1")] == ["accepted"]
    assert all(event["outcome"] != "refused" for event in audited(client, "fine-1"))


def test_a_request_refused_for_its_key_is_recorded_with_what_can_be_kept_of_it(client: TestClient) -> None:
    empty = client.post("/v1/transfers/txn_01NOSUCH/void", headers={"Idempotency-Key": ""})
    long_key = "k" * 300
    too_long = client.post("/v1/transfers/txn_01NOSUCH/void", headers={"Idempotency-Key": long_key})
    assert [reply.json()["error"] for reply in (empty, too_long)] == ["invalid_idempotency_key"] * 2
    refused = client.get("/v1/audit_events", params={"outcome": "refused", "type": "api.transfers.void"}).json()
    keys = [event["data"]["idempotency_key"] for event in refused["data"]]
    assert keys == [long_key[:255], None]  # newest first
