"""The OpenAPI document states what the API accepts: a schema-driven fuzzer (or a generated
client) that sends a value the document allows must not be refused for it. Each documented
enum and pattern is checked here against the API itself, value by value.

Not expressible in JSON Schema, and so still left to the services: amounts written as `1.0`
(JSON Schema's "integer" admits them; SPEC §5 refuses them), the pairing of a payout's rail
with its currency, and the currencies a deployment enables for credits (a setting)."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from paycore.kit.money import CURRENCY_EXPONENTS
from paycore.payouts import states


def _document(client: TestClient) -> dict[str, Any]:
    document: dict[str, Any] = client.get("/openapi.json").json()
    return document


def _parameter(document: dict[str, Any], path: str, name: str, method: str = "get") -> dict[str, Any]:
    for parameter in document["paths"][path][method]["parameters"]:
        if parameter["name"] == name:
            schema: dict[str, Any] = parameter["schema"]
            return schema
    raise AssertionError(f"{path} documents no parameter {name}")


def test_every_documented_currency_opens_an_account(client: TestClient) -> None:
    schema = _document(client)["components"]["schemas"]["AccountCreate"]["properties"]["currency"]
    assert schema["enum"] == sorted(CURRENCY_EXPONENTS)
    for currency in schema["enum"]:
        body = {"code": f"doc.{currency}", "currency": currency, "normal_balance": "credit"}
        response = client.post("/v1/accounts", json=body, headers={"Idempotency-Key": f"doc-{currency}"})
        assert response.status_code == 201, response.text


def test_every_documented_payout_status_filters_the_list(client: TestClient) -> None:
    schema = _parameter(_document(client), "/v1/payouts", "status")
    assert schema["enum"] == [states.public(status) for status in states.STATUSES]
    for status in schema["enum"]:
        response = client.get("/v1/payouts", params={"status": status})
        assert response.status_code == 200, response.text
    assert client.get("/v1/payouts", params={"status": "settling"}).json()["error"] == "invalid_request"


def test_the_loss_report_documents_its_filters(client: TestClient) -> None:
    document = _document(client)
    day = _parameter(document, "/v1/reports/losses", "from")
    assert re.fullmatch(day["pattern"], "2026-12-01") and not re.fullmatch(day["pattern"], "")
    for rail in _parameter(document, "/v1/reports/losses", "rail")["enum"]:
        for currency in _parameter(document, "/v1/reports/losses", "currency")["enum"]:
            params = {"from": "2026-01-01", "to": "2026-12-31", "rail": rail, "currency": currency}
            response = client.get("/v1/reports/losses", params=params)
            assert response.status_code == 200, response.text
    assert client.get("/v1/reports/losses", params={"from": ""}).json()["error"] == "invalid_date"


def test_the_tenant_in_a_path_is_documented_as_the_api_checks_it(client: TestClient) -> None:
    pattern = _parameter(_document(client), "/v1/tenants/{tenant_id}/balance", "tenant_id")["pattern"]
    for tenant_id, accepted in [("t1", True), ("a.b_c-D", True), ("x" * 64, True), ("x" * 65, False), ("ú", False)]:
        assert bool(re.fullmatch(pattern, tenant_id)) is accepted, tenant_id
        response = client.get(f"/v1/tenants/{tenant_id}/balance")
        assert (response.status_code == 200) is accepted, (tenant_id, response.text)
        if not accepted:
            assert response.json()["error"] == "invalid_tenant_id"
