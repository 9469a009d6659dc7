"""The thin edges of `POST /v1/payments/{payment_id}/capture` and `/cancel`
(paycore.http.money.payment_operations) answer exactly as the FastAPI routes they stand in front
of: the same requests, good and bad, sent in the same order to an app with the edges and to one
without them (each on its own fresh database and its own sandbox processor, with the same
account and payments made first) get the same status, headers and JSON body (new ids and times
aside). The capture edge must serve the well-formed bodies itself and hand every other one to
the FastAPI route; the cancel edge reads no body, as its route reads none, and serves every
cancel."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payment_operations as money_operations
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore_sandbox.inprocess import InProcessTransport
from tests.support import edges

JSON, PLUS_JSON = edges.JSON, "application/vnd.paycore+json"
EDGE, ROUTE, NO_KEY = edges.EDGE, edges.ROUTE, edges.NO_KEY


def _c(name: str) -> str:
    return f"/v1/payments/@{name}/capture"


def _x(name: str) -> str:
    return f"/v1/payments/@{name}/cancel"


def _amount(value: Any) -> bytes:
    return json.dumps({"amount_minor": value}).encode()


# (what it is, path, body, Idempotency-Key header(s) or NO_KEY, content type, hand-overs): in order.
# @A1..@A5: authorizations of 1000; @S: an automatic payment that succeeded.
CASES: list[tuple[str, str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("a capture of part", _c("A1"), _amount(300), "c1", JSON, EDGE),
    ("its replay", _c("A1"), _amount(300), "c1", JSON, EDGE),
    ("its key with another amount", _c("A1"), _amount(301), "c1", JSON, EDGE),
    ("its key capturing all", _c("A1"), b"{}", "c1", JSON, EDGE),
    ("its replay, +json", _c("A1"), _amount(300), "c1", PLUS_JSON, ROUTE),
    ("a captured payment, a new key", _c("A1"), b"{}", "c2", JSON, EDGE),
    ("capture all", _c("A2"), b"{}", "c3", JSON, EDGE),
    ("its replay, no content type", _c("A2"), b"{}", "c3", None, EDGE),
    ("more than capturable", _c("A3"), _amount(1001), "c4", JSON, EDGE),
    ("its replay, refused", _c("A3"), _amount(1001), "c4", JSON, EDGE),
    ("the largest amount", _c("A3"), _amount(AMOUNT_MINOR_MAX), "c5", JSON, EDGE),
    ("an automatic payment", _c("S"), b"{}", "c6", JSON, EDGE),
    ("an unknown payment", "/v1/payments/pay_nope/capture", b"{}", "c7", JSON, EDGE),
    ("no Idempotency-Key", _c("A3"), b"{}", NO_KEY, JSON, EDGE),
    ("a key with a space", _c("A3"), b"{}", "c x", JSON, EDGE),
    ("a charset parameter", _c("A3"), _amount(10), "c8", "application/json; charset=utf-8", EDGE),
    ("an amount null", _c("A3"), _amount(None), "c9", JSON, ROUTE),
    ("a bool amount", _c("A3"), _amount(True), "c10", JSON, ROUTE),
    ("a float amount", _c("A3"), b'{"amount_minor": 10.0}', "c11", JSON, ROUTE),
    ("an amount as text", _c("A3"), _amount("10"), "c12", JSON, ROUTE),
    ("a zero amount", _c("A3"), _amount(0), "c13", JSON, ROUTE),
    ("a negative amount", _c("A3"), _amount(-1), "c14", JSON, ROUTE),
    ("an amount past 2^53-1", _c("A3"), _amount(AMOUNT_MINOR_MAX + 1), "c15", JSON, ROUTE),
    ("an extra field", _c("A3"), b'{"amount_minor": 10, "note": "x"}', "c16", JSON, ROUTE),
    ("a repeated field", _c("A3"), b'{"amount_minor": 1, "amount_minor": 2}', "c17", JSON, ROUTE),
    ("not JSON", _c("A3"), b"{not json", "c18", JSON, ROUTE),
    ("an empty body", _c("A3"), b"", "c19", JSON, ROUTE),
    ("a JSON array", _c("A3"), b"[]", "c20", JSON, ROUTE),
    ("a bad body, an unknown payment", "/v1/payments/pay_nope/capture", _amount(0), "c21", JSON, ROUTE),
    ("a cancel", _x("A4"), b"", "x1", None, EDGE),
    ("its replay", _x("A4"), b"", "x1", None, EDGE),
    ("a canceled payment, a new key", _x("A4"), b"", "x2", None, EDGE),
    ("a cancel with a body (ignored)", _x("A5"), b"{not json", "x3", JSON, EDGE),
    ("a capture of a canceled payment", _c("A5"), b"{}", "c22", JSON, EDGE),
    ("a cancel of a captured payment", _x("A2"), b"", "x4", None, EDGE),
    ("a cancel of an automatic payment", _x("S"), b"", "x5", None, EDGE),
    ("a cancel of an unknown payment", "/v1/payments/pay_nope/cancel", b"", "x6", None, EDGE),
    ("a cancel without a key", _x("A3"), b"", NO_KEY, None, EDGE),
    ("a cancel of a part-captured one", _x("A1"), b"", "x7", None, EDGE),
]


def _apps(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    edge = create_app(settings, database, sandboxes[0])
    without = edges.without_edge(other_settings, other_database, money_operations.CAPTURE_ROUTE, sandboxes[1])
    without.router.routes.remove(money_operations.CANCEL_ROUTE)
    return edge, without


def _made(client: TestClient) -> dict[bytes, bytes]:
    """A merchant account, five authorizations of 1000 to it (@A1..@A5) and a succeeded
    automatic payment (@S)."""
    account = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
    response = client.post("/v1/accounts", json=account)
    assert response.status_code == 201, response.text
    made = {}
    for name, capture in [(f"A{n}", "manual") for n in range(1, 6)] + [("S", "automatic")]:
        payment = {
            "amount_minor": 1000,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": response.json()["id"],
            "capture": capture,
        }
        paid = client.post("/v1/payments", json=payment, headers={"Idempotency-Key": f"pay-{name}"})
        assert paid.status_code == 201, paid.text
        made[f"@{name}".encode()] = paid.json()["id"].encode()
    return made


def test_every_request_is_answered_as_the_fastapi_routes_answer_it(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    monkeypatch: Any,
) -> None:
    handed_over = edges.count_hand_overs(
        monkeypatch, money_operations._CaptureEndpoint, money_operations._CancelEndpoint
    )
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        edge_made, route_made = _made(edge), _made(route)
        for name, path, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = edges.post(edge, edge_made, path, body, key, content_type)
            assert answered == edges.post(route, route_made, path, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        statuses = [
            [client.get(f"/v1/payments/{made[f'@{n}'.encode()].decode()}").json()["status"] for n in ("A1", "A2", "A4")]
            for client, made in ((edge, edge_made), (route, route_made))
        ]
        assert statuses[0] == statuses[1] == ["succeeded", "succeeded", "canceled"]
