"""The OpenAPI document at `/openapi.json` (SPEC §3): FastAPI's rendering of the routes, plus
what the server enforces that the route declarations alone do not say, so that a request the
document allows is never refused without the document saying why.

What JSON Schema can state is stated (bounds, patterns, the currencies this deployment
enables, who needs a key). What it cannot (an amount written `1235.0`, which JSON Schema's
`integer` admits; an IBAN's check digits; a cursor naming an object that exists) is said in
the description of the field at fault, with the error code the server answers. The fuzz run
(`scripts/fuzz`) holds the server to exactly that: a schema-valid request may be refused
only with a code the description of its `param` names.

Built once per application (the settings it reads do not change while it runs)."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from paycore.config import Settings
from paycore.http import openapi_fields, openapi_responses

log = logging.getLogger(__name__)

SECURITY_SCHEME = "apiKey"
_OPEN_PATHS = ("/healthz", "/readyz", "/metrics")
_SIGNED_PATHS = ("/v1/webhooks/processor",)

DESCRIPTION = """A payments core on an append-only double-entry ledger. Amounts are integer minor units.

**Authentication.** Every `/v1` operation needs `Authorization: Bearer pck_...` (an API key printed
once by `paycore tenants create`), except `POST /v1/webhooks/processor`, which the processor signs
instead (`Paycore-Signature`). In local mode (no API key in the database yet) no key is needed and a
request acts as the tenant named by the `Paycore-Tenant` header, or `default`; the server then
refuses to listen on anything but a loopback address. `/healthz`, `/readyz`, `/metrics` and
`/openapi.json` are open.

**Errors** are `{"error": "<code>", "message": "<sentence>"}`, plus `"param"` when one field is at
fault. Where a field's rule cannot be written in JSON Schema, its description says so and names the
code.

**Strings** may not contain the NUL character (U+0000), anywhere: 400.

**JSON bodies.** A body that is not JSON is 400 `invalid_json`. A body that names a key twice in one
object, at any depth (`{"amount_minor": 1, "amount_minor": 999999}`), is 400 `duplicate_json_key`,
`param` the key's path (`lines[0].amount_minor`): parsers disagree on which value wins, so it is never
read. Nothing is stored.

**Pagination.** Lists take `limit` (1-100) and `starting_after`: the id of the last object of the
previous page, an object the list holds. Empty, unknown, another tenant's or another list's id:
400 `invalid_starting_after`, on every list alike.

**Methods.** A method a path does not list (`OPTIONS` included: paycore is called server to server,
without CORS) is 405 `method_not_allowed` with an `Allow` header naming exactly the methods listed."""


def install(app: FastAPI, settings: Settings) -> None:
    """Replace FastAPI's document builder by ours: one document while the server is in local
    mode (the key optional), one once it is not (the key required). Local mode ends for good
    when the first key is created (`AuthState`), so each is built once."""
    documents: dict[bool, dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        try:
            local_mode = not app.state.auth.is_auth_required()
        except Exception:  # no database (yet): the document still answers, saying a key is needed
            log.warning("openapi: local mode unknown", extra={"event": "openapi_auth_mode_unknown"})
            local_mode = False
        if local_mode not in documents:
            documents[local_mode] = build(app, settings, local_mode=local_mode)
        return documents[local_mode]

    app.openapi = openapi  # type: ignore[method-assign]


def build(app: FastAPI, settings: Settings, *, local_mode: bool) -> dict[str, Any]:
    document = get_openapi(title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes)
    schemas: dict[str, Any] = document["components"]["schemas"]
    _declare_security(document, local_mode=local_mode)
    openapi_responses.declare(document)
    _link(document)
    for operation in _operations(document):
        _simplify_query_parameters(operation)
        _refine_parameters(operation)
    for schema in schemas.values():
        _refine_amounts(schema)
    openapi_fields.refine(schemas, settings)
    for schema in schemas.values():
        _refuse_nul(schema)
    return document


def _operations(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in document["paths"].values():
        yield from item.values()


def _declare_security(document: dict[str, Any], *, local_mode: bool) -> None:
    document["components"]["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "pck_... (an API key from `paycore tenants create`)",
            "description": "Required on every /v1 operation but the processor's webhook. In local mode "
            "(no API key in the database yet) no key is needed: the request acts as the tenant named by "
            "the Paycore-Tenant header, or `default`. A missing or unknown key is 401 `unauthorized`; "
            "another tenant's path is 403 `forbidden`.",
        }
    }
    # In local mode a request without a key is served: `{}` is OpenAPI's "no credentials".
    keyed: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}, {}] if local_mode else [{SECURITY_SCHEME: []}]
    for path, item in document["paths"].items():
        for operation in item.values():
            needs_key = path.startswith("/v1/") and path not in _SIGNED_PATHS
            operation["security"] = keyed if needs_key else []
            if needs_key and local_mode:
                operation.setdefault("parameters", []).append(copy.deepcopy(_LOCAL_TENANT))
            if not needs_key:
                operation.get("responses", {}).pop("401", None)
                operation.get("responses", {}).pop("403", None)


# Served only in local mode (SPEC §3.2); with keys the key names the tenant and the header is ignored.
_LOCAL_TENANT = {
    "name": "Paycore-Tenant",
    "in": "header",
    "required": False,
    "description": "Local mode only: the tenant the request acts as (default `default`). 1-64 characters "
    "of [A-Za-z0-9_.-] (else 400 invalid_tenant_id).",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
}


# What a created object's id opens (OpenAPI links): for readers, and for the stateful
# phase of the fuzz run, which follows them from a create to what it made.
_LINKS: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {
    ("/v1/accounts", ("201",)): (
        "account_id",
        ("/v1/accounts/{account_id}", "/v1/accounts/{account_id}/balance", "/v1/accounts/{account_id}/entries"),
    ),
    ("/v1/transfers", ("201",)): (
        "transfer_id",
        (
            "/v1/transfers/{transfer_id}",
            "/v1/transfers/{transfer_id}/post",
            "/v1/transfers/{transfer_id}/void",
            "/v1/transfers/{transfer_id}/reverse",
        ),
    ),
    ("/v1/payments", ("201", "202")): (
        "payment_id",
        (
            "/v1/payments/{payment_id}",
            "/v1/payments/{payment_id}/events",
            "/v1/payments/{payment_id}/refunds",
            "/v1/payments/{payment_id}/capture",
            "/v1/payments/{payment_id}/cancel",
        ),
    ),
    ("/v1/payments/{payment_id}/refunds", ("201",)): (
        "refund_id",
        (
            "/v1/refunds/{refund_id}",
            "/v1/refunds/{refund_id}/events",
            "/v1/refunds/{refund_id}/approve",
            "/v1/refunds/{refund_id}/cancel",
        ),
    ),
    ("/v1/payouts", ("201",)): (
        "payout_id",
        (
            "/v1/payouts/{payout_id}",
            "/v1/payouts/{payout_id}/events",
            "/v1/payouts/{payout_id}/cancel",
            "/v1/payouts/{payout_id}/adjustments",
        ),
    ),
    ("/v1/webhook_endpoints", ("201",)): (
        "endpoint_id",
        ("/v1/webhook_endpoints/{endpoint_id}", "/v1/webhook_endpoints/{endpoint_id}/rotate_secret"),
    ),
}


_LINK_NAME = re.compile("[^A-Za-z0-9]+")  # a link's name follows a component name's rule


def _link(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for (source, statuses), (parameter, targets) in _LINKS.items():
        links = {
            _LINK_NAME.sub("_", f"{method}{target}").strip("_"): {
                "operationRef": "#/paths/" + target.replace("~", "~0").replace("/", "~1") + f"/{method}",
                "parameters": {parameter: "$response.body#/id"},
            }
            for target in targets
            for method in paths[target]
        }
        for status in statuses:
            paths[source]["post"]["responses"][status]["links"] = links


def _simplify_query_parameters(operation: dict[str, Any]) -> None:
    """An optional query parameter is left out, never sent as JSON null: FastAPI renders
    `str | None` as `anyOf: [string, null]`, which says a client may send `null`."""
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        branches = schema.get("anyOf")
        if parameter["in"] != "query" or not branches:
            continue
        kept = [branch for branch in branches if branch.get("type") != "null"]
        if len(kept) == 1:
            del schema["anyOf"]
            schema.update(kept[0])


def _refine_parameters(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        refine = openapi_fields.PARAMETERS.get(parameter["name"])
        if refine is not None:
            refine(parameter)
        if parameter["in"] in ("path", "query"):  # a NUL there is 400 (http/middleware.py)
            _refuse_nul(parameter.get("schema", {}))


AMOUNT_RULE = (
    "A JSON integer of the currency's minor units, from {low} to 2^53-1, written without a fraction "
    "or exponent: `1235.0` is refused with 400 invalid_amount although JSON Schema's integer admits "
    'it, as are `true` and `"199"`.'
)


def _refine_amounts(schema: Any) -> None:
    """Every `*_minor` property: an integer from 1 (0 where zero means something) to 2^53-1."""
    if isinstance(schema, list):
        for item in schema:
            _refine_amounts(item)
        return
    if not isinstance(schema, dict):
        return
    for name, value in schema.get("properties", {}).items():
        if name.endswith("_minor"):
            _as_amount(value, name=name)
    for value in schema.values():
        if isinstance(value, dict | list):
            _refine_amounts(value)


def _as_amount(schema: dict[str, Any], *, name: str) -> None:
    integer = next((branch for branch in schema.get("anyOf", []) if branch.get("type") == "integer"), schema)
    # Pydantic may render a bound as 0.0: the document shows integers, as the API does.
    low = 1 if "exclusiveMinimum" in integer else int(integer.get("minimum", 1))
    bounded = {"type": "integer", "minimum": low, "maximum": int(integer["maximum"])}
    keep: dict[str, Any] = {key: schema[key] for key in ("title", "default") if key in schema}
    schema.clear()
    schema.update(keep)
    if name in NULLABLE_AMOUNTS:
        schema["anyOf"] = [bounded, {"type": "null"}]
    else:  # an optional amount is left out, never null (null is invalid_amount)
        schema.update(bounded)
    schema["description"] = AMOUNT_RULE.format(low=low) + NULLABLE_AMOUNTS.get(name, " Null is refused too.")


# The amounts where null means something; every other amount refuses null (400 invalid_amount).
NULLABLE_AMOUNTS = {
    "refund_approval_threshold_minor": " Null: no refund waits for approval. An API key may only lower it or set "
    "one where there was none: raising or clearing it is 403 approver_required (an approver's, in the console)."
}


NUL_FREE = "^[^\\u0000]*$"


def _refuse_nul(schema: Any) -> None:
    """Every string in a request body, path or query: no NUL (PostgreSQL text cannot hold it;
    refused on both databases alike). A pattern of its own already leaves NUL out."""
    if isinstance(schema, list):
        for item in schema:
            _refuse_nul(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and "pattern" not in schema and "enum" not in schema and "const" not in schema:
        schema["pattern"] = NUL_FREE
    if schema.get("type") == "object" and "additionalProperties" in schema:
        names = schema.setdefault("propertyNames", {})
        if "pattern" not in names:
            names["pattern"] = NUL_FREE
    for value in schema.values():
        if isinstance(value, dict | list):
            _refuse_nul(value)
