"""POST /v1/payouts, GET, list, cancel, events over HTTP (SPEC §11): validation codes, the
hold, idempotency, the audit log of every schedule result (accepted and refused)."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.payouts.models import payouts
from tests.support.payouts import balance, books_ok, funded_source

TENANT = "default"  # local mode: requests act as the default tenant
_keys = itertools.count(1)


def body(source: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "amount_minor": 1_000,
        "currency": "USD",
        "source_account": source,
        "beneficiary": {"name": "Ada Lovelace", "routing_number": "110000000", "account_number": "000123456789"},
        "rail": "ach",
    }
    payload.update(changes)
    return payload


def post(client: TestClient, payload: Any, key: str | None = None) -> Any:
    return client.post("/v1/payouts", json=payload, headers={"Idempotency-Key": key or f"po-{next(_keys)}"})


def refused_requests(database: Database) -> list[dict[str, Any]]:
    query = select(events.c.cause, events.c.data, events.c.object_type).where(events.c.kind == "api_call")
    with database.read() as connection:
        return [dict(row._mapping) for row in connection.execute(query) if row.object_type == "request"]


def test_schedule_answers_201_and_holds_the_amount(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    response = post(client, body(source, metadata={"order": "42"}))
    assert response.status_code == 201, response.text
    payout = response.json()
    assert payout["status"] == "scheduled" and payout["id"].startswith("po_")
    assert payout["beneficiary"]["account_number_last4"] == "6789"
    assert "000123456789" not in response.text  # full account numbers never leave
    assert [(h["from"], h["to"]) for h in payout["history"]] == [(None, "scheduled")]
    assert balance(database, TENANT, source) == (5_000, -1_000, 4_000)
    assert client.get(f"/v1/payouts/{payout['id']}").json()["status"] == "scheduled"
    listed = client.get("/v1/payouts?status=scheduled").json()["data"]
    assert [p["id"] for p in listed] == [payout["id"]]
    kinds = [e["kind"] for e in client.get(f"/v1/payouts/{payout['id']}/events").json()["data"]]
    assert kinds == ["state_change", "api_call"] or kinds == ["api_call", "state_change"]
    assert books_ok(database)


def test_sepa_payouts_take_an_iban(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000, currency="EUR")
    sepa = {"name": "Émilie", "iban": "DE89 3704 0044 0532 0130 00", "bic": "COBADEFFXXX"}
    response = post(client, body(source, currency="EUR", rail="sepa", beneficiary=sepa))
    assert response.status_code == 201, response.text
    assert response.json()["beneficiary"]["iban_last4"] == "3000"


@pytest.mark.parametrize(
    ("changes", "code", "param"),
    [
        ({"amount_minor": 1.0}, "invalid_amount", "amount_minor"),
        ({"amount_minor": 0}, "invalid_amount", "amount_minor"),
        ({"amount_minor": "100"}, "invalid_amount", "amount_minor"),
        ({"currency": "EUR"}, "unsupported_rail_currency", "currency"),
        ({"rail": "wire"}, "invalid_request", "rail"),
        ({"execute_on": "2020-01-01"}, "invalid_execute_on", "execute_on"),
        ({"execute_on": "tomorrow"}, "invalid_execute_on", "execute_on"),
        (
            {"beneficiary": {"name": "A", "routing_number": "110000001", "account_number": "000123456789"}},
            "invalid_routing_number",
            "beneficiary.routing_number",
        ),
        (
            {"beneficiary": {"name": "A", "routing_number": "110000000", "account_number": "12ab"}},
            "invalid_account_number",
            "beneficiary.account_number",
        ),
        ({"beneficiary": {"name": "A", "iban": "DE89370400440532013000"}}, "invalid_beneficiary", "beneficiary"),
        (
            {"currency": "EUR", "rail": "sepa", "beneficiary": {"name": "A", "iban": "DE89370400440532013001"}},
            "invalid_iban",
            "beneficiary.iban",
        ),
        (
            {
                "currency": "EUR",
                "rail": "sepa",
                "beneficiary": {"name": "A", "iban": "DE89370400440532013000", "bic": "ABCDXX12"},
            },
            "invalid_bic",
            "beneficiary.bic",
        ),
    ],
)
def test_bad_input_is_a_clear_400_stores_nothing_and_is_audited(
    client: TestClient, database: Database, changes: dict[str, Any], code: str, param: str
) -> None:
    source = funded_source(database, TENANT, 5_000)
    response = post(client, body(source, **changes))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == code
    assert response.json().get("param") == param
    with database.read() as connection:
        assert list(connection.execute(select(payouts.c.id))) == []
    assert balance(database, TENANT, source) == (5_000, 0, 5_000)
    assert [(r["cause"], r["object_type"]) for r in refused_requests(database)] == [("refused", "request")]


def test_insufficient_funds_is_422_recorded_replayed_and_audited(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 500)
    first = post(client, body(source), key="too-much")
    assert first.status_code == 422 and first.json()["error"] == "insufficient_funds"
    again = post(client, body(source), key="too-much")
    assert again.status_code == 422 and again.headers.get("idempotent-replayed") == "true"
    assert len(refused_requests(database)) == 1  # the replay is not a second result
    assert balance(database, TENANT, source) == (500, 0, 500)


def test_missing_key_and_reused_key(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    missing = client.post("/v1/payouts", json=body(source))
    assert missing.status_code == 400 and missing.json()["error"] == "idempotency_key_required"
    assert post(client, body(source), key="k").status_code == 201
    reused = post(client, body(source, amount_minor=999), key="k")
    assert reused.status_code == 409 and reused.json()["error"] == "idempotency_key_reused"
    assert balance(database, TENANT, source) == (5_000, -1_000, 4_000)
    assert sorted(json.loads(r["data"])["error"] for r in refused_requests(database)) == [
        "idempotency_key_required",
        "idempotency_key_reused",
    ]


def test_one_key_sent_concurrently_makes_one_payout_and_one_hold(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(client, body(source), key="same"), range(8)))
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["id"] for a in answers}) == 1
    with database.read() as connection:
        assert len(list(connection.execute(select(payouts.c.id)))) == 1
    assert balance(database, TENANT, source) == (5_000, -1_000, 4_000)


def test_cancel_twice_answers_the_same_body_and_voids_the_hold(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    payout_id = post(client, body(source)).json()["id"]
    first = client.post(f"/v1/payouts/{payout_id}/cancel", headers={"Idempotency-Key": "c1"})
    assert first.status_code == 200 and first.json()["status"] == "canceled"
    second = client.post(f"/v1/payouts/{payout_id}/cancel", headers={"Idempotency-Key": "c2"})
    assert second.status_code == 200 and second.json() == first.json()
    assert balance(database, TENANT, source) == (5_000, 0, 5_000)
    missing = client.post("/v1/payouts/po_nope/cancel", headers={"Idempotency-Key": "c3"})
    assert missing.status_code == 404 and missing.json()["error"] == "payout_not_found"


def test_payouts_of_another_tenant_are_not_found(client: TestClient, database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    payout_id = post(client, body(source)).json()["id"]
    other = {"Paycore-Tenant": "other"}
    assert client.get(f"/v1/payouts/{payout_id}", headers=other).status_code == 404
    assert client.get(f"/v1/payouts/{payout_id}/events", headers=other).status_code == 404
    cancel = client.post(f"/v1/payouts/{payout_id}/cancel", headers={**other, "Idempotency-Key": "x"})
    assert cancel.status_code == 404
    assert client.get("/v1/payouts", headers=other).json()["data"] == []
