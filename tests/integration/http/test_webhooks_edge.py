"""The thin edge of `POST /v1/webhooks/processor` (paycore.http.money.webhooks) answers exactly
as the FastAPI route it stands in front of: the same events, signed and not, good and bad, sent
in the same order to an app with the edge and to one without it (each on its own fresh
database and its own sandbox processor, with the same payments made first) get the same status,
headers and JSON body, and leave the same stored events. The edge reads every request itself:
none is handed to the FastAPI route."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import webhooks as money_webhooks
from paycore.kit import signing
from paycore.kit.clock import now_us
from paycore_sandbox.inprocess import InProcessTransport
from tests.support import edges

PATH = "/v1/webhooks/processor"
JSON = edges.JSON
SIGNED, UNSIGNED, BAD_SIGNATURE, LATE = "signed", "unsigned", "bad signature", "late"


def _event(event_id: str, payment: str = "@P", **data: Any) -> bytes:
    """A charge event for the payment named (`@P` settled by the processor's answer, `@Q` still
    `processing`), as the sandbox sends one, with data fields changed."""
    fields = {
        "object": "charge",
        "request_id": payment,
        "merchant_id": "default",
        "status": "succeeded",
        "amount_minor": 500,
        "currency": "USD",
        "processor_charge_id": "ch_1",
        **data,
    }
    kind = f"{fields['object']}.{fields['status']}"
    document = {"id": event_id, "type": kind, "created_at": "2026-12-06T00:00:00Z", "sequence": 1, "data": fields}
    return json.dumps(document).encode()


# (what it is, body, how it is signed, content type): sent in order.
CASES: list[tuple[str, bytes, str, str | None]] = [
    ("a settled payment's event: stale", _event("evt_e1"), SIGNED, JSON),
    ("its redelivery: duplicate", _event("evt_e1"), SIGNED, JSON),
    ("a declined event for it: conflict", _event("evt_e2", status="failed", failure_code="declined"), SIGNED, JSON),
    ("another amount: mismatch", _event("evt_e3", amount_minor=501), SIGNED, JSON),
    ("a processing payment's event: applied", _event("evt_e4", "@Q"), SIGNED, JSON),
    ("its redelivery", _event("evt_e4", "@Q"), SIGNED, JSON),
    ("a second event for it: stale", _event("evt_e5", "@Q"), SIGNED, JSON),
    ("an unknown payment: unmatched", _event("evt_e6", "pay_unknown"), SIGNED, JSON),
    ("a pending charge", _event("evt_e7", status="pending"), SIGNED, JSON),
    ("a refund's event", _event("evt_e8", "ref_unknown", object="refund"), SIGNED, JSON),
    ("no content type", _event("evt_e9"), SIGNED, None),
    ("a charset parameter", _event("evt_e10"), SIGNED, "application/json; charset=utf-8"),
    ("text/plain", _event("evt_e11"), SIGNED, "text/plain"),
    ("no signature", _event("evt_e12"), UNSIGNED, JSON),
    ("a bad signature", _event("evt_e13"), BAD_SIGNATURE, JSON),
    ("an hour late", _event("evt_e14"), LATE, JSON),
    ("not JSON", b"{not json", SIGNED, JSON),
    ("an empty body", b"", SIGNED, JSON),
    ("a JSON array", b"[]", SIGNED, JSON),
    ("a repeated key", _event("evt_e15").replace(b"{", b'{"id": "evt_x", ', 1), SIGNED, JSON),
    ("a payout's status for a charge", _event("evt_e16", status="settled"), SIGNED, JSON),
    ("no data", b'{"id": "evt_e17", "type": "charge.succeeded", "created_at": "", "sequence": 1}', SIGNED, JSON),
    ("an amount as text", _event("evt_e18", amount_minor="500"), SIGNED, JSON),
    ("a lone surrogate", _event("evt_e19").replace(b"ch_1", b"\\ud800"), SIGNED, JSON),
]


def _apps(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    edge = create_app(settings, database, sandboxes[0])
    return edge, edges.without_edge(other_settings, other_database, money_webhooks.ROUTE, sandboxes[1])


def _payments(client: TestClient) -> dict[bytes, bytes]:
    """@P: a payment the processor's answer settled; @Q: one it left `processing` (`tok_pending`)."""
    account = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
    response = client.post("/v1/accounts", json=account)
    assert response.status_code == 201, response.text
    made = {}
    for name, token in ((b"@P", "tok_ok"), (b"@Q", "tok_pending")):
        body = {
            "amount_minor": 500,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": response.json()["id"],
        }
        paid = client.post("/v1/payments", json=body, headers={"Idempotency-Key": token})
        assert paid.status_code in (201, 202), paid.text
        made[name] = paid.json()["id"].encode()
    return made


def _send(
    client: TestClient, names: dict[bytes, bytes], body: bytes, signed: str, content_type: str | None, at_s: int
) -> tuple[Any, ...]:
    for name, made in names.items():
        body = body.replace(name, made)
    secret = client.app.state.settings.processor_webhook_secret  # type: ignore[attr-defined]
    headers = {}
    if signed != UNSIGNED:
        signature = signing.sign(secret, at_s - (3600 if signed == LATE else 0), body)
        headers[signing.SIGNATURE_HEADER] = signature.replace("v1=", "v1=0") if signed == BAD_SIGNATURE else signature
    return edges.post(client, {}, PATH, body, edges.NO_KEY, content_type, **headers)


def _stored(database: Database) -> list[tuple[Any, ...]]:
    """The stored events, and the audit events they left (their data: the event's id, the
    request's id from X-Request-Id), in a fixed order."""
    with database.read() as connection:
        rows = connection.execute(text("SELECT event_id, status, attempts FROM processor_webhooks ORDER BY event_id"))
        audit = connection.execute(
            text("SELECT type, object_type, cause, actor, data FROM events WHERE kind = 'webhook' ORDER BY data")
        )
        return [tuple(row) for row in rows] + [tuple(row) for row in audit]


def test_every_event_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    monkeypatch: Any,
) -> None:
    handed_over = edges.count_hand_overs(monkeypatch, money_webhooks._WebhookEndpoint)
    served: list[str] = []
    call = money_webhooks._WebhookEndpoint.__call__

    async def counted(self: Any, scope: Any, receive: Any, send: Any) -> None:
        served.append(scope["path"])
        await call(self, scope, receive, send)

    monkeypatch.setattr(money_webhooks._WebhookEndpoint, "__call__", counted)
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        edge_payments, route_payments = _payments(edge), _payments(route)
        results = []
        for name, body, signed, content_type in CASES:
            at_s = now_us() // 1_000_000
            answered = _send(edge, edge_payments, body, signed, content_type, at_s)
            assert answered == _send(route, route_payments, body, signed, content_type, at_s), name
            results.append((answered[0], json.loads(answered[2]).get("result")))
        assert edge.get(PATH).status_code == route.get(PATH).status_code
        assert edge.put(PATH).headers.get("allow") == route.put(PATH).headers.get("allow")
        statuses = [
            client.get(f"/v1/payments/{made[b'@Q'].decode()}").json()["status"]
            for client, made in ((edge, edge_payments), (route, route_payments))
        ]
    assert handed_over == [] and len(served) == len(CASES) - 1, "the edge read all but text/plain (BodyLimit's 415)"
    assert statuses == ["succeeded", "succeeded"]
    assert results[:8] == [
        (200, "stale"),
        (200, "duplicate"),
        (200, "conflict"),
        (200, "mismatch"),
        (200, "applied"),
        (200, "duplicate"),
        (200, "stale"),
        (200, "unmatched"),
    ], results
    assert {status for status, _ in results[13:]} == {400}, results
    stored = _stored(database)
    assert stored == _stored(other[1]) and len(stored) >= 15, stored
    assert all('"request_id":"same-id"' in str(row[-1]) for row in stored if len(row) == 5), stored
