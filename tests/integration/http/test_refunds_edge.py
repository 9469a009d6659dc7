"""The thin edge of `POST /v1/payments/{payment_id}/refunds` (paycore.http.money.refunds) answers
exactly as the FastAPI route it stands in front of: the same bodies and headers, good and bad,
sent in the same order to an app with the edge and to one without it (each on its own fresh
database and its own sandbox processor, with the same account and payments made first) get the
same status, headers and JSON body (new ids and times aside). The edge must serve the well-formed
bodies itself and hand every other one to the FastAPI route."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import refunds as money_refunds
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import service as tenants
from paycore_sandbox.inprocess import InProcessTransport
from tests.support import edges

JSON, PLUS_JSON = edges.JSON, "application/vnd.paycore+json"
EDGE, ROUTE, NO_ROUTE, NO_KEY = edges.EDGE, edges.ROUTE, edges.NO_ROUTE, edges.NO_KEY
PAID = "/v1/payments/@P/refunds"  # a succeeded payment of 1000
DECLINED = "/v1/payments/@D/refunds"
_GONE = object()


def _r(**fields: Any) -> bytes:
    """A refund of 100, with fields changed, added or taken out."""
    body = {"amount_minor": 100, **fields}
    return json.dumps({name: value for name, value in body.items() if value is not _GONE}).encode()


# (what it is, path, body, Idempotency-Key header(s) or NO_KEY, content type, who answers): in order.
CASES: list[tuple[str, str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("first refund", PAID, _r(), "k1", JSON, EDGE),
    ("its replay", PAID, _r(), "k1", JSON, EDGE),
    ("its key with another body", PAID, _r(amount_minor=101), "k1", JSON, EDGE),
    ("its key with the default written out", PAID, _r(reason=None), "k1", JSON, EDGE),
    ("its key on another payment", DECLINED, _r(), "k1", JSON, EDGE),
    # The route reads a +json body too: the edge's fingerprint must be the route's, both ways.
    ("its replay, +json", PAID, _r(), "k1", PLUS_JSON, ROUTE),
    ("a +json refund", PAID, _r(amount_minor=5), "k2", PLUS_JSON, ROUTE),
    ("the +json refund's replay at the edge", PAID, _r(amount_minor=5, reason=None), "k2", JSON, EDGE),
    ("no Idempotency-Key", PAID, _r(), NO_KEY, JSON, EDGE),
    ("a key with a space", PAID, _r(), "k x", JSON, EDGE),
    ("the key header twice", PAID, _r(amount_minor=7), ("k1", "kd"), JSON, EDGE),
    ("the key header twice, a new key first", PAID, _r(amount_minor=7), ("kd", "k1"), JSON, EDGE),
    ("a key too long", PAID, _r(), "k" * 256, JSON, EDGE),
    ("with a reason", PAID, _r(reason="requested_by_customer"), "k3", JSON, EDGE),
    ("the longest reason", PAID, _r(reason="r" * 500), "k4", JSON, EDGE),
    ("a reason beyond ASCII", PAID, _r(reason="café ☕ 𝄞"), "k5", JSON, EDGE),
    ("a charset parameter", PAID, _r(), "k12", "application/json; charset=utf-8", EDGE),
    ("no content type", PAID, _r(), "k13", None, EDGE),
    ("an over-refund", PAID, _r(amount_minor=10**6), "k6", JSON, EDGE),
    ("its replay, refused", PAID, _r(amount_minor=10**6), "k6", JSON, EDGE),
    ("the largest amount", PAID, _r(amount_minor=AMOUNT_MINOR_MAX), "k7", JSON, EDGE),
    # Refunded so far: 100 (k1), 5 (k2), 100 (k x), 7 (kd), 100 (k3, k4, k5, k12, k13).
    ("the rest of the payment", PAID, _r(amount_minor=1000 - 100 - 5 - 100 - 7 - 100 * 5), "k8", JSON, EDGE),
    ("one more", PAID, _r(amount_minor=1), "k9", JSON, EDGE),
    ("a declined payment", DECLINED, _r(), "k10", JSON, EDGE),
    ("an unknown payment", "/v1/payments/pay_nope/refunds", _r(), "k11", JSON, EDGE),
    ("a bool amount", PAID, _r(amount_minor=True), "k30", JSON, ROUTE),
    ("a float amount", PAID, b'{"amount_minor": 100.0}', "k31", JSON, ROUTE),
    ("a huge amount", PAID, b'{"amount_minor": 1e400}', "k32", JSON, ROUTE),
    ("an amount as text", PAID, _r(amount_minor="100"), "k33", JSON, ROUTE),
    ("a zero amount", PAID, _r(amount_minor=0), "k34", JSON, ROUTE),
    ("a negative amount", PAID, _r(amount_minor=-1), "k35", JSON, ROUTE),
    ("an amount past 2^53-1", PAID, _r(amount_minor=AMOUNT_MINOR_MAX + 1), "k36", JSON, ROUTE),
    ("an amount null", PAID, _r(amount_minor=None), "k37", JSON, ROUTE),
    ("no amount", PAID, _r(amount_minor=_GONE), "k38", JSON, ROUTE),
    ("no amount, a reason", PAID, _r(amount_minor=_GONE, reason="x"), "k39", JSON, ROUTE),
    ("an empty reason", PAID, _r(reason=""), "k40", JSON, ROUTE),
    ("a reason too long", PAID, _r(reason="r" * 501), "k41", JSON, ROUTE),
    ("a reason as a number", PAID, _r(reason=7), "k42", JSON, ROUTE),
    ("a reason as a list", PAID, _r(reason=["x"]), "k43", JSON, ROUTE),
    ("a NUL in the reason", PAID, _r(reason="a\x00b"), "k44", JSON, ROUTE),
    ("a lone surrogate", PAID, b'{"amount_minor": 1, "reason": "\\ud800"}', "k45", JSON, ROUTE),
    ("an extra field", PAID, _r(metadata={}), "k46", JSON, ROUTE),
    ("a repeated field", PAID, b'{"amount_minor": 1, "amount_minor": 2}', "k47", JSON, ROUTE),
    ("a bad body and no key", PAID, _r(amount_minor=True), NO_KEY, JSON, ROUTE),
    ("a bad body, an unknown payment", "/v1/payments/pay_nope/refunds", _r(amount_minor=0), "k48", JSON, ROUTE),
    ("not JSON", PAID, b"{not json", "k49", JSON, ROUTE),
    ("an empty body", PAID, b"", "k50", JSON, ROUTE),
    ("an empty object", PAID, b"{}", "k51", JSON, ROUTE),
    ("a JSON array", PAID, b"[]", "k52", JSON, ROUTE),
    ("JSON null", PAID, b"null", "k53", JSON, ROUTE),
    ("nested deep", PAID, b"[" * 100_000 + b"]" * 100_000, "k54", JSON, ROUTE),
    ("not UTF-8", PAID, b'{"reason":"\xff"}', "k55", JSON, ROUTE),
    ("text/plain", PAID, _r(), "k56", "text/plain", NO_ROUTE),
]


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the edge handed to the FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_refunds._RefundsEndpoint)


def _apps(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    edge = create_app(settings, database, sandboxes[0])
    return edge, edges.without_edge(other_settings, other_database, money_refunds.ROUTE, sandboxes[1])


def _made(client: TestClient, **headers: str) -> dict[bytes, bytes]:
    """A merchant account, a succeeded payment of 1000 to it (@P) and a declined one (@D)."""
    account = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
    response = client.post("/v1/accounts", json=account, headers=headers)
    assert response.status_code == 201, response.text
    made = {}
    for name, token, status in (("P", "tok_ok", 201), ("D", "tok_declined", 402)):
        payment = {
            "amount_minor": 1000,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": response.json()["id"],
        }
        paid = client.post("/v1/payments", json=payment, headers={"Idempotency-Key": f"pay-{name}", **headers})
        assert paid.status_code == status, paid.text
        made[f"@{name}".encode()] = paid.json()["id"].encode()
    return made


def test_every_body_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    handed_over: list[str],
) -> None:
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        edge_made, route_made = _made(edge), _made(route)
        for name, path, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = edges.post(edge, edge_made, path, body, key, content_type)
            assert answered == edges.post(route, route_made, path, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        _, path, body, key, content_type, _ = CASES[0]  # the first refund, once more after all else
        replayed = edges.post(edge, edge_made, path, body, key, content_type)
        assert replayed[:2] == (201, {**replayed[1], "idempotent-replayed": "true"}), replayed
        listed = [
            client.get(f"/v1/payments/{made[b'@P'].decode()}/refunds", params={"limit": 100}).json()["data"]
            for client, made in ((edge, edge_made), (route, route_made))
        ]
        assert [(r["amount_minor"], r["reason"], r["status"]) for r in listed[0]] == [
            (r["amount_minor"], r["reason"], r["status"]) for r in listed[1]
        ]
        assert sum(r["amount_minor"] for r in listed[0]) == 1000, "refunded in full, never more"


def _api_key(database: Database, tenant: str) -> str:
    return database.transaction(lambda connection: tenants.create_tenant(connection, tenant, now_us=now_us())).api_key


def test_with_api_keys_401_and_404_come_as_they_did(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    handed_over: list[str],
) -> None:
    keys = [_api_key(db, name) for db in (database, other[1]) for name in ("acme", "other")]
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        made = (
            _made(edge, Authorization=f"Bearer {keys[0]}"),
            _made(route, Authorization=f"Bearer {keys[2]}"),
        )
        clients = ((edge, made[0], keys[0], keys[1]), (route, made[1], keys[2], keys[3]))
        for body, served_by_edge in ((_r(), True), (b'{"amount_minor": true}', False), (b"{no", False)):
            answers = []
            for client, names, own, stranger in clients:
                answers.append(
                    [
                        edges.post(client, names, PAID, body, "a1", JSON),
                        edges.post(client, names, PAID, body, "a1", JSON, Authorization="Bearer nope"),
                        edges.post(client, names, PAID, body, "a1", JSON, Authorization="Basic x"),
                        edges.post(client, names, PAID, body, "a1", JSON, Authorization=f"Bearer {stranger}"),
                        edges.post(client, names, PAID, body, "a1", JSON, Authorization=f"Bearer {own}"),
                    ]
                )
            statuses = [status for status, *_ in answers[0]]
            if served_by_edge:  # another tenant's key does not see acme's payment: 404
                assert statuses == [401, 401, 401, 404, 201], answers[0]
            assert answers[0] == answers[1], body
        assert len(handed_over) == 2 * 5, "each bad body handed over five times"
