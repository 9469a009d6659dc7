"""What each operation answers, for the OpenAPI document: the endpoints return `Response`s
built by the domains' `*_json` functions, so FastAPI renders their bodies as `{}`. These
schemas state the shape a client may rely on (required keys, `object`, id prefixes, every
`*_minor` an integer within 2^53 - 1, never a float); extra keys are allowed, so a new field
is not a breaking change. The fuzz run checks every answer against them."""

from __future__ import annotations

from typing import Any

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.reconciliation import queries as reconciliation_queries

JsonSchema = dict[str, Any]

AMOUNT: JsonSchema = {"type": "integer", "minimum": -AMOUNT_MINOR_MAX, "maximum": AMOUNT_MINOR_MAX}
TIMESTAMP: JsonSchema = {"type": "string", "format": "date-time"}
_NULL: JsonSchema = {"type": "null"}


def _nullable(schema: JsonSchema) -> JsonSchema:
    return {"anyOf": [schema, _NULL]}


def _resource(kind: str | None, prefix: str | None, *fields: str, **properties: JsonSchema) -> JsonSchema:
    """An object with `fields` required; `*_minor` fields are amounts unless given."""
    shaped: dict[str, JsonSchema] = {name: AMOUNT for name in fields if name.endswith("_minor")}
    if kind is not None:
        shaped["object"] = {"const": kind}
    if prefix is not None:
        shaped["id"] = {"type": "string", "pattern": f"^{prefix}_"}
    if "created_at" in fields:
        shaped["created_at"] = TIMESTAMP
    shaped.update(properties)
    required = sorted(set(fields) | ({"object"} if kind else set()) | ({"id"} if prefix else set()))
    return {"type": "object", "required": required, "properties": shaped}


def _list(item: JsonSchema, **extra: JsonSchema) -> JsonSchema:
    schema = _resource("list", None, "data", "has_more", data={"type": "array", "items": item})
    schema["properties"]["has_more"] = {"type": "boolean"}
    schema["properties"].update(extra)
    schema["required"] = sorted(set(schema["required"]) | set(extra))
    return schema


ENTRY = _resource(None, "ent", "transfer_id", "account_id", "amount_minor", "currency", "created_at")
ENTRY["properties"]["amount_minor"] = {"type": "integer", "minimum": 1, "maximum": AMOUNT_MINOR_MAX}
ACCOUNT = _resource("account", "acct", "code", "currency", "normal_balance", "created_at")
ACCOUNT_BALANCE = _resource(None, None, "account_id", "currency", "posted_minor", "pending_minor", "available_minor")
TRANSFER = _resource(
    "transfer",
    "txn",
    "status",
    "entries",
    "amount_minor",
    "posted_minor",
    "created_at",
    amount_minor=_nullable(AMOUNT),
    posted_minor=_nullable(AMOUNT),
    entries={"type": "array", "items": ENTRY, "minItems": 2},
    owner_id=_nullable({"type": "string"}),
)
BATCH = _resource("batch", "batch", "transfers", transfers={"type": "array", "items": TRANSFER, "minItems": 1})
CREDIT = _resource(None, "cr", "tenant_id", "currency", "amount_minor", "lines", "created_at")
TENANT_BALANCE = _resource(None, None, "currency", "amount_minor")
_PAYMENT_FIELDS = (
    "amount_minor",
    "currency",
    "status",
    "refunded_minor",
    "refundable_minor",
    "disputed_minor",
    "capture",
    "amount_capturable_minor",
    "amount_captured_minor",
    "authorization_expires_at",
    "cancellation_reason",
    "in_doubt_operation",
    "created_at",
)
# Authorize now, capture later (SPEC §6.1): the fields every payment carries, automatic or not.
_CAPTURE_PROPERTIES: dict[str, JsonSchema] = {
    "capture": {"enum": ["automatic", "manual"]},
    "authorization_expires_at": _nullable(TIMESTAMP),
    "cancellation_reason": _nullable({"enum": ["requested", "expired"]}),
    "in_doubt_operation": _nullable({"enum": ["authorize", "charge", "capture", "cancel"]}),
}
PAYMENT = _resource("payment", None, "id", *_PAYMENT_FIELDS, **_CAPTURE_PROPERTIES)
DECLINED_PAYMENT = _resource(
    "payment",
    None,
    "id",
    "error",
    "message",
    *_PAYMENT_FIELDS,
    error={"type": "string"},
    message={"type": "string"},
    **_CAPTURE_PROPERTIES,
)
REFUND = _resource("refund", "rf", "payment", "amount_minor", "currency", "status", "created_at")
PAYOUT = _resource("payout", "po", "amount_minor", "currency", "rail", "status", "created_at")
ADJUSTMENT = _resource("payout_adjustment", "adj", "payout", "kind", "amount_minor", "currency", "created_at")
EVENT = _resource("event", "evt", "created_at")
_DISPUTE_PROPERTIES: dict[str, JsonSchema] = {
    "status": {"enum": ["needs_response", "under_review", "won", "lost", "warning_needs_response", "warning_closed"]},
    "type": {"enum": ["chargeback", "inquiry"]},
    "payment_id": {"type": "string", "pattern": "^pay_"},
    "evidence_due_by": TIMESTAMP,
    "fee_minor": {"type": "integer", "minimum": 0, "maximum": AMOUNT_MINOR_MAX},
}
_DISPUTE_FIELDS = ("payment_id", "amount_minor", "currency", "fee_minor", "reason", "status", "evidence_due_by")
DISPUTE = _resource("dispute", "dp", *_DISPUTE_FIELDS, "created_at", **_DISPUTE_PROPERTIES)
DISPUTE_WITH_HISTORY = _resource(
    "dispute", "dp", *_DISPUTE_FIELDS, "created_at", "history", **_DISPUTE_PROPERTIES, history={"type": "array"}
)
_STRING: JsonSchema = {"type": "string"}
RECONCILIATION_RUN = _resource(
    "reconciliation_run",
    "rcn",
    "day",
    "source",
    "status",
    "report_sha256",
    "breaks",
    "created_at",
    "finished_at",
    status={"enum": list(reconciliation_queries.RUN_STATUSES)},
    report_sha256=_nullable(_STRING),
    breaks={
        "type": "object",
        "propertyNames": {"enum": list(reconciliation_queries.BREAK_TYPES)},
        "additionalProperties": {"type": "integer", "minimum": 1},
    },
    finished_at=_nullable(TIMESTAMP),
)
RECONCILIATION_BREAK = _resource(
    "reconciliation_break",
    "brk",
    "type",
    "status",
    "day",
    "run_id",
    "object_type",
    "object_id",
    "object_status",
    "line_number",
    "line",
    "detail",
    "resolution",
    "note",
    "resolved_by",
    "resolved_at",
    "created_at",
    type={"enum": list(reconciliation_queries.BREAK_TYPES)},
    status={"enum": list(reconciliation_queries.BREAK_STATUSES)},
    line={"type": "array", "items": _STRING},
    resolved_at=_nullable(TIMESTAMP),
)
LOSS_ROW = _resource("payout_loss", None, "payout_id", "currency", "amount_minor", "loss_minor", loss_minor=AMOUNT)
LOSS_REPORT = _list(
    LOSS_ROW,
    totals={"type": "array", "items": _resource(None, None, "currency", "loss_minor", "payouts")},
    dispute_totals={
        "type": "array",
        "items": _resource(
            None, None, "currency", "dispute_fees_minor", "lost_chargebacks_minor", "loss_minor", "disputes"
        ),
    },
)
SETTINGS = _resource(
    None,
    None,
    "refund_approval_threshold_minor",
    "manual_resolution_after_seconds",
    refund_approval_threshold_minor=_nullable({"type": "integer", "minimum": 0, "maximum": AMOUNT_MINOR_MAX}),
    manual_resolution_after_seconds={"type": "integer", "minimum": 0, "maximum": 31_536_000},
)
PUBLISHED_EVENT = _resource(
    "event",
    "evt",
    "type",
    "created_at",
    "sequence",
    "object_type",
    "object_id",
    "data",
    sequence=_nullable({"type": "integer", "minimum": 1}),
    data={"type": "object", "required": ["id", "object"]},
)
AUDIT_EVENT = _resource(
    "audit_event",
    "evt",
    "kind",
    "type",
    "object_type",
    "object_id",
    "cause",
    "actor",
    "outcome",
    "data",
    "created_at",
    actor={"type": "string", "minLength": 1, "maxLength": 64},
    outcome=_nullable(_STRING),
    data={"type": "object"},
)
WEBHOOK_ENDPOINT = _resource("webhook_endpoint", "we", "url", "events", "status", "created_at")
WEBHOOK_ENDPOINT_WITH_SECRET = _resource(
    "webhook_endpoint",
    "we",
    "url",
    "events",
    "status",
    "secret",
    "created_at",
    secret={"type": "string", "pattern": "^whsec_"},
)
_WEBHOOK_ATTEMPT = _resource(None, "wha", "attempt", "outcome", "status_code", "latency_ms", "error")
WEBHOOK_DELIVERY = _resource(
    "webhook_delivery",
    "whd",
    "event_id",
    "endpoint_id",
    "status",
    "attempts",
    "created_at",
    attempts={"type": "array", "items": _WEBHOOK_ATTEMPT},
)
WEBHOOK_RECEIPT = _resource(None, None, "received", "event_id", "result", received={"const": True})
HEALTH = _resource(None, None, "status", status={"const": "ok"})
NOT_READY = _resource(None, None, "status", status={"const": "unavailable"})

# (path, method) -> {status: body schema}
BODIES: dict[tuple[str, str], dict[str, JsonSchema]] = {
    ("/healthz", "get"): {"200": HEALTH},
    ("/readyz", "get"): {"200": HEALTH, "503": NOT_READY},
    ("/v1/tenants/{tenant_id}/credits", "post"): {"200": CREDIT, "201": CREDIT},
    ("/v1/tenants/{tenant_id}/balance", "get"): {"200": TENANT_BALANCE},
    ("/v1/accounts", "post"): {"201": ACCOUNT},
    ("/v1/accounts/{account_id}", "get"): {"200": ACCOUNT},
    ("/v1/accounts/{account_id}/balance", "get"): {"200": ACCOUNT_BALANCE},
    ("/v1/accounts/{account_id}/entries", "get"): {"200": _list(ENTRY)},
    ("/v1/transfers", "post"): {"201": TRANSFER},
    ("/v1/transfers/batch", "post"): {"201": BATCH},
    ("/v1/transfers/{transfer_id}", "get"): {"200": TRANSFER},
    ("/v1/transfers/{transfer_id}/post", "post"): {"200": TRANSFER},
    ("/v1/transfers/{transfer_id}/void", "post"): {"200": TRANSFER},
    ("/v1/transfers/{transfer_id}/reverse", "post"): {"201": TRANSFER},
    ("/v1/payments", "post"): {"201": PAYMENT, "202": PAYMENT, "402": DECLINED_PAYMENT},
    ("/v1/payments", "get"): {"200": _list(PAYMENT)},
    ("/v1/payments/{payment_id}", "get"): {"200": PAYMENT},
    ("/v1/payments/{payment_id}/capture", "post"): {"200": PAYMENT, "202": PAYMENT},
    ("/v1/payments/{payment_id}/cancel", "post"): {"200": PAYMENT, "202": PAYMENT},
    ("/v1/payments/{payment_id}/events", "get"): {"200": _list(EVENT)},
    ("/v1/payments/{payment_id}/refunds", "post"): {"201": REFUND},
    ("/v1/payments/{payment_id}/refunds", "get"): {"200": _list(REFUND)},
    ("/v1/refunds", "get"): {"200": _list(REFUND)},
    ("/v1/disputes", "get"): {"200": _list(DISPUTE)},
    ("/v1/disputes/{dispute_id}", "get"): {"200": DISPUTE_WITH_HISTORY},
    ("/v1/disputes/{dispute_id}/evidence", "post"): {"200": DISPUTE_WITH_HISTORY, "202": DISPUTE_WITH_HISTORY},
    ("/v1/disputes/{dispute_id}/accept", "post"): {"200": DISPUTE_WITH_HISTORY, "202": DISPUTE_WITH_HISTORY},
    ("/v1/refunds/{refund_id}", "get"): {"200": REFUND},
    ("/v1/refunds/{refund_id}/approve", "post"): {"200": REFUND},
    ("/v1/refunds/{refund_id}/cancel", "post"): {"200": REFUND},
    ("/v1/refunds/{refund_id}/events", "get"): {"200": _list(EVENT)},
    ("/v1/payouts", "post"): {"201": PAYOUT},
    ("/v1/payouts", "get"): {"200": _list(PAYOUT)},
    ("/v1/payouts/{payout_id}", "get"): {"200": PAYOUT},
    ("/v1/payouts/{payout_id}/cancel", "post"): {"200": PAYOUT},
    ("/v1/payouts/{payout_id}/events", "get"): {"200": _list(EVENT)},
    ("/v1/payouts/{payout_id}/adjustments", "post"): {"201": ADJUSTMENT},
    ("/v1/payouts/{payout_id}/adjustments", "get"): {"200": _list(ADJUSTMENT)},
    ("/v1/reports/losses", "get"): {"200": LOSS_REPORT},
    ("/v1/events", "get"): {"200": _list(PUBLISHED_EVENT)},
    ("/v1/audit_events", "get"): {"200": _list(AUDIT_EVENT)},
    ("/v1/events/{event_id}", "get"): {"200": PUBLISHED_EVENT},
    ("/v1/events/{event_id}/deliveries", "get"): {"200": _list(WEBHOOK_DELIVERY)},
    ("/v1/events/{event_id}/redeliver", "post"): {"200": _list(WEBHOOK_DELIVERY)},
    ("/v1/webhook_endpoints", "post"): {"201": WEBHOOK_ENDPOINT_WITH_SECRET},
    ("/v1/webhook_endpoints", "get"): {"200": _list(WEBHOOK_ENDPOINT)},
    ("/v1/webhook_endpoints/{endpoint_id}", "get"): {"200": WEBHOOK_ENDPOINT},
    ("/v1/webhook_endpoints/{endpoint_id}", "patch"): {"200": WEBHOOK_ENDPOINT},
    ("/v1/webhook_endpoints/{endpoint_id}", "delete"): {"200": WEBHOOK_ENDPOINT},
    ("/v1/webhook_endpoints/{endpoint_id}/rotate_secret", "post"): {"200": WEBHOOK_ENDPOINT_WITH_SECRET},
    ("/v1/reconciliation/runs", "get"): {"200": _list(RECONCILIATION_RUN)},
    ("/v1/reconciliation/runs/{run_id}", "get"): {"200": RECONCILIATION_RUN},
    ("/v1/reconciliation/breaks", "get"): {"200": _list(RECONCILIATION_BREAK)},
    ("/v1/reconciliation/breaks/{break_id}", "get"): {"200": RECONCILIATION_BREAK},
    ("/v1/reconciliation/breaks/{break_id}/resolve", "post"): {"200": RECONCILIATION_BREAK},
    ("/v1/settings", "get"): {"200": SETTINGS},
    ("/v1/settings", "put"): {"200": SETTINGS},
    ("/v1/webhooks/processor", "post"): {"200": WEBHOOK_RECEIPT},
}


def declare(document: dict[str, Any]) -> None:
    """Put each body schema in its response (added where FastAPI listed no such status)."""
    for (path, method), bodies in BODIES.items():
        responses = document["paths"][path][method]["responses"]
        for status, schema in bodies.items():
            response = responses.setdefault(status, {"description": "See the schema"})
            response["content"] = {"application/json": {"schema": schema}}
