"""The OpenAPI document states what the API accepts: a schema-driven fuzzer (or a generated
client) that sends a value the document allows must not be refused for it. Each documented
enum and pattern is checked here against the API itself, value by value.

Not expressible in JSON Schema, and so still left to the services: amounts written as `1.0`
(JSON Schema's "integer" admits them; SPEC §5 refuses them), the pairing of a payout's rail
with its currency, and the currencies a deployment enables for credits (a setting)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.disputes import states as dispute_states
from paycore.http.app import create_app
from paycore.kit.clock import now_us
from paycore.kit.money import CURRENCY_EXPONENTS
from paycore.payouts import states
from paycore.refunds import states as refund_states
from paycore.tenants import service as tenants


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


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("/v1/payouts", [states.public(status) for status in states.STATUSES]),
        ("/v1/refunds", list(refund_states.STATUSES)),
        ("/v1/disputes", list(dispute_states.STATUSES)),
    ],
)
def test_an_unknown_status_filter_is_a_400_naming_the_statuses(client: TestClient, path: str, names: list[str]) -> None:
    response = client.get(path, params={"status": "settling"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["error"], body["param"]) == ("invalid_request", "status")
    assert body["message"] == f"status must be one of {', '.join(names)}"
    assert _parameter(_document(client), path, "status")["enum"] == names


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


# --- issue 18: what the server enforces, stated in the document -------------------------

LISTS = {
    "/v1/payments",
    "/v1/payouts",
    "/v1/refunds",
    "/v1/disputes",
    "/v1/events",
    "/v1/audit_events",
    "/v1/payments/{payment_id}/refunds",
    "/v1/accounts/{account_id}/entries",
    "/v1/reports/losses",
    "/v1/reconciliation/runs",
    "/v1/reconciliation/breaks",
    "/v1/webhook_endpoints",
}


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, operation) for path, item in document["paths"].items() for method, operation in item.items()]


@pytest.mark.parametrize("local_mode", [True, False])
def test_the_bearer_scheme_is_declared_and_every_v1_operation_but_the_webhook_needs_it(
    client: TestClient, database: Database, local_mode: bool
) -> None:
    """In local mode (no key yet) the key is optional (`{}`: no credentials), as served."""
    if not local_mode:
        database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
    keyed: list[dict[str, list[str]]] = [{"apiKey": []}, {}] if local_mode else [{"apiKey": []}]
    document = _document(client)
    assert (client.get("/v1/settings").status_code == 200) is local_mode
    schemes = document["components"]["securitySchemes"]
    assert schemes == {"apiKey": {**schemes["apiKey"], "type": "http", "scheme": "bearer"}}
    assert "pck_" in schemes["apiKey"]["bearerFormat"] and "local mode" in schemes["apiKey"]["description"]
    for path, method, operation in _operations(document):
        if path == "/v1/webhooks/processor":
            assert operation["security"] == [], "signed by the processor, not a key"
            signature = _parameter(document, path, "Paycore-Signature", method)
            assert signature["pattern"] and "invalid_signature" in _description(
                document, path, method, "Paycore-Signature"
            )
        elif path.startswith("/v1/"):
            assert operation["security"] == keyed, (method, path)
            tenant_header = [p for p in operation.get("parameters", []) if p["name"] == "Paycore-Tenant"]
            assert len(tenant_header) == (1 if local_mode else 0), (method, path)
        else:
            assert operation.get("security", []) == [], (method, path)


def _description(document: dict[str, Any], path: str, method: str, name: str) -> str:
    for parameter in document["paths"][path][method]["parameters"]:
        if parameter["name"] == name:
            return str(parameter["description"])
    raise AssertionError(f"{method} {path} documents no parameter {name}")


def _amounts(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every `*_minor` property under a schema, with where it was found."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        for name, value in schema.get("properties", {}).items():
            if name.endswith("_minor"):
                found.append((f"{path}.{name}", value))
        for key, value in schema.items():
            if key != "oneOf":  # the shapes a body may take, over properties described above
                found.extend(_amounts(value, f"{path}/{key}"))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found.extend(_amounts(value, f"{path}[{index}]"))
    return found


def test_every_amount_states_its_bounds_and_that_a_written_fraction_is_refused(client: TestClient) -> None:
    amounts = _amounts(_document(client)["components"]["schemas"])
    assert len(amounts) >= 8
    for where, schema in amounts:
        integer = schema if "anyOf" not in schema else schema["anyOf"][0]
        if where.endswith(".refund_approval_threshold_minor"):  # null: no threshold
            assert schema["anyOf"][1] == {"type": "null"}, schema
        else:
            assert "anyOf" not in schema, (where, schema)  # never nullable: null is invalid_amount
        assert integer["type"] == "integer", (where, schema)
        assert integer["maximum"] == 2**53 - 1 and integer["minimum"] in (0, 1), (where, schema)
        assert all(type(integer[bound]) is int for bound in ("minimum", "maximum")), (where, schema)
        assert "1235.0" in schema["description"] and "invalid_amount" in schema["description"], where


def test_a_schema_valid_amount_with_a_fraction_is_refused_as_documented(client: TestClient) -> None:
    body = b'{"amount_minor": 1235.0}'
    headers = {"Idempotency-Key": "frac-1", "content-type": "application/json"}
    response = client.post("/v1/transfers/txn_nope/post", content=body, headers=headers)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_amount")
    null = client.post("/v1/transfers/txn_nope/post", content=b'{"amount_minor": null}', headers=headers)
    assert (null.status_code, null.json()["error"]) == (400, "invalid_amount")


def test_credits_document_the_currencies_this_deployment_enables(client: TestClient) -> None:
    schema = _document(client)["components"]["schemas"]["CreditLineIn"]["properties"]["currency"]
    assert schema["enum"] == ["USD"]  # Settings.enabled_credit_currencies
    body = {"idempotency_key": "cur-1", "lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]}
    assert client.post("/v1/tenants/default/credits", json=body).status_code == 201


def test_every_list_answers_an_empty_or_unknown_cursor_the_same_way(client: TestClient) -> None:
    document = _document(client)
    paged = {path for path, method, op in _operations(document) if method == "get" and _has(op, "starting_after")}
    assert paged == LISTS
    for path in LISTS:
        text = _description(document, path, "get", "starting_after")
        assert "invalid_starting_after" in text, path
        assert _parameter(document, path, "starting_after")["minLength"] == 1, path
    account = client.post("/v1/accounts", json={"code": "c", "currency": "USD", "normal_balance": "credit"}).json()
    payment = _a_payment(client, account["id"])
    concrete = {"{account_id}": account["id"], "{payment_id}": payment}
    for path in sorted(LISTS):
        for name, value in concrete.items():
            path = path.replace(name, value)
        for cursor in ("", "zz_unknown", "evt_01NOSUCHOBJECT0000000000"):
            response = client.get(path, params={"starting_after": cursor})
            body = response.json()
            assert (response.status_code, body.get("error"), body.get("param")) == (
                400,
                "invalid_starting_after",
                "starting_after",
            ), (path, cursor, body)


def _has(operation: dict[str, Any], name: str) -> bool:
    return any(parameter["name"] == name for parameter in operation.get("parameters", []))


def _a_payment(client: TestClient, account_id: str) -> str:
    """A payment whose outcome is unknown (no processor answers here): it exists, in_doubt."""
    body = {
        "amount_minor": 100,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_visa"},
        "destination_account": account_id,
    }
    response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": "pay-cursor"})
    assert response.status_code in (201, 202), response.text
    return str(response.json()["id"])


def test_options_and_allow_agree_with_the_documented_methods(client: TestClient) -> None:
    """OPTIONS is not served (paycore is called server to server; no CORS): 405 with an
    `Allow` naming exactly the methods the document lists for the path, like any other
    method a path does not serve. A concrete path (`/v1/transfers/batch`) is not also the
    template beside it (`/v1/transfers/{transfer_id}`), as OpenAPI matches paths."""
    for path, item in _document(client)["paths"].items():
        concrete = path.replace("{", "x").replace("}", "")
        documented = {method.upper() for method in item}
        response = client.options(concrete)
        assert response.status_code == 405, (path, response.text)
        assert set(response.headers["Allow"].split(", ")) == documented, (path, response.headers["Allow"])
    shadowed = client.get("/v1/transfers/batch")
    assert (shadowed.status_code, shadowed.headers.get("Allow")) == (405, "POST")


def test_the_document_answers_without_a_database(tmp_path: Path) -> None:
    """Whether the server is in local mode is read from the database; with none (not yet
    migrated) the document still answers, saying a key is needed."""
    settings = Settings(database_url=f"sqlite:///{tmp_path}/empty.db")
    with TestClient(create_app(settings, Database(settings))) as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json()["paths"]["/v1/settings"]["get"]["security"] == [{"apiKey": []}]


def _strings(schema: Any) -> list[dict[str, Any]]:
    """Every string schema (and object key schema) under `schema`."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "string" and "enum" not in schema and "const" not in schema:
            found.append(schema)
        if "propertyNames" in schema:
            found.append({"type": "string", **schema["propertyNames"]})
        for key, value in schema.items():
            if key != "propertyNames":
                found.extend(_strings(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(_strings(value))
    return found


def test_every_string_a_client_sends_is_documented_without_nul(client: TestClient) -> None:
    """The server refuses NUL in any string of a body, path or query (400): the document says so."""
    document = _document(client)
    strings = _strings(document["components"]["schemas"])
    for _path, _method, operation in _operations(document):
        for parameter in operation.get("parameters", []):
            if parameter["in"] in ("path", "query"):
                strings.extend(_strings(parameter["schema"]))
    assert len(strings) > 40
    for schema in strings:
        assert "pattern" in schema, schema
        assert re.search(schema["pattern"], "a\x00b") is None, schema


def test_every_success_documents_its_body_and_amounts_are_integers(client: TestClient) -> None:
    """The endpoints build their bodies by hand, which FastAPI rendered as `{}`: the document
    now states each success's shape, every `*_minor` an integer within 2^53 - 1."""
    document = _document(client)
    for path, method, operation in _operations(document):
        if path == "/metrics":
            continue
        for status, response in operation["responses"].items():
            if not status.startswith("2"):
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema.get("type") == "object" and schema["required"], (method, path, status)
            for where, amount in _amounts(schema):
                integer = amount.get("anyOf", [amount])[0]
                assert integer["type"] == "integer" and integer["maximum"] == 2**53 - 1, (path, where)
    account = client.post("/v1/accounts", json={"code": "shape", "currency": "EUR", "normal_balance": "debit"})
    balance = client.get(f"/v1/accounts/{account.json()['id']}/balance").json()
    for path, body in [("/v1/accounts", account.json()), ("/v1/accounts/{account_id}/balance", balance)]:
        method = "post" if path == "/v1/accounts" else "get"
        status = "201" if method == "post" else "200"
        schema = document["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
        assert set(schema["required"]) <= set(body), (path, body)
