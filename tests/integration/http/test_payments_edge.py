"""The thin edge of `POST /v1/payments` (paycore.http.money.payments) answers exactly as the
FastAPI route it stands in front of: the same bodies and headers, good and bad, sent in the same
order to an app with the edge and to one without it (each on its own fresh database and its own
sandbox processor, with the same accounts made first) get the same status, headers and JSON body
(new ids and times aside). The edge must serve the well-formed bodies itself and hand every other
one to the FastAPI route."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payments as money_payments
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import service as tenants
from paycore_sandbox.inprocess import InProcessTransport
from tests.support import edges

PATH = "/v1/payments"
JSON = edges.JSON
# The accounts each app's database gets first, in this order; a body names them as @A, @B, ...
ACCOUNTS = {
    "A": {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"},
    "E": {"code": "merchant.euro", "currency": "EUR", "normal_balance": "credit"},
}
_GONE = object()


def _p(**fields: Any) -> bytes:
    """A payment of 500 USD to @A with `tok_ok`, with fields changed, added or taken out."""
    body = {
        "amount_minor": 500,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": "@A",
        **fields,
    }
    return json.dumps({name: value for name, value in body.items() if value is not _GONE}).encode()


def _raw_amount(amount_json: str) -> bytes:
    source = '{"type":"card","token":"tok_ok"}'
    return f'{{"amount_minor":{amount_json},"currency":"USD","source":{source},"destination_account":"@A"}}'.encode()


def _source(**fields: Any) -> dict[str, Any]:
    source = {"type": "card", "token": "tok_ok", **fields}
    return {name: value for name, value in source.items() if value is not _GONE}


EDGE, ROUTE, NO_ROUTE, NO_KEY = edges.EDGE, edges.ROUTE, edges.NO_ROUTE, edges.NO_KEY
# (what it is, body, Idempotency-Key header(s) or NO_KEY, content type, who answers): sent in order.
CASES: list[tuple[str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("first payment", _p(), "k1", JSON, EDGE),
    ("its replay", _p(), "k1", JSON, EDGE),
    ("its key with another body", _p(amount_minor=501), "k1", JSON, EDGE),
    ("its key with the defaults written out", _p(description=None, metadata={}), "k1", JSON, EDGE),
    (
        "its key with the fields in another order",
        b'{"destination_account":"@A","currency":"USD","source":{"token":"tok_ok","type":"card"},"amount_minor":500}',
        "k1",
        JSON,
        EDGE,
    ),
    ("no Idempotency-Key", _p(), NO_KEY, JSON, EDGE),
    ("a key with a space", _p(), "k x", JSON, EDGE),
    ("the key header twice", _p(amount_minor=7), ("k1", "kd"), JSON, EDGE),
    ("the key header twice, a new key first", _p(amount_minor=7), ("kd", "k1"), JSON, EDGE),
    ("a key too long", _p(), "k" * 256, JSON, EDGE),
    ("every optional field", _p(description="order 7", metadata={"order": "7"}), "k2", JSON, EDGE),
    ("an empty description", _p(description=""), "k3", JSON, EDGE),
    ("the longest description", _p(description="d" * 1000), "k4", JSON, EDGE),
    ("a declined card", _p(source=_source(token="tok_declined")), "k5", JSON, EDGE),
    ("insufficient funds", _p(source=_source(token="tok_insufficient_funds")), "k6", JSON, EDGE),
    ("its replay, declined", _p(source=_source(token="tok_insufficient_funds")), "k6", JSON, EDGE),
    ("an unknown token", _p(source=_source(token="tok_nope")), "k7", JSON, EDGE),
    ("the longest token", _p(source=_source(token="t" * 255)), "k8", JSON, EDGE),
    ("an unknown account", _p(destination_account="acct_nope"), "k9", JSON, EDGE),
    ("a currency mismatch", _p(destination_account="@E"), "k10", JSON, EDGE),
    ("in the account's currency", _p(destination_account="@E", currency="EUR"), "k11", JSON, EDGE),
    ("an unknown currency", _p(currency="XYZ"), "k12", JSON, EDGE),
    ("a currency in lower case", _p(currency="usd"), "k13", JSON, EDGE),
    ("the largest amount", _p(amount_minor=AMOUNT_MINOR_MAX), "k14", JSON, EDGE),
    ("metadata past metadata_keys_max", _p(metadata={f"k{i}": "v" for i in range(21)}), "k15", JSON, EDGE),
    ("metadata past metadata_bytes_max", _p(metadata={f"k{i}": "v" * 300 for i in range(20)}), "k16", JSON, EDGE),
    ("metadata at the model's bounds", _p(metadata={"k" * 40: "v" * 500}), "k17", JSON, EDGE),
    ("text beyond ASCII", _p(metadata={"café": "☕ 𝄞"}, description="ré 𝄞"), "k18", JSON, EDGE),
    ("a charset parameter", _p(), "k19", "application/json; charset=utf-8", EDGE),
    ("no content type", _p(), "k20", None, EDGE),
    # Authorize now, capture later (ADR 0029): the edge reads `capture` itself.
    ("an authorization", _p(capture="manual"), "k21", JSON, EDGE),
    ("its replay", _p(capture="manual"), "k21", JSON, EDGE),
    ("its key without capture", _p(), "k21", JSON, EDGE),
    ("the first payment's key, capture automatic written out", _p(capture="automatic"), "k1", JSON, EDGE),
    ("the first payment's key as an authorization", _p(capture="manual"), "k1", JSON, EDGE),
    ("a declined authorization", _p(capture="manual", source=_source(token="tok_declined")), "k22", JSON, EDGE),
    ("an authorization in euros", _p(capture="manual", destination_account="@E", currency="EUR"), "k23", JSON, EDGE),
    ("an authorization's replay, +json", _p(capture="manual"), "k21", "application/vnd.paycore+json", ROUTE),
    ("capture null", _p(capture=None), "k24", JSON, ROUTE),
    ("capture in capitals", _p(capture="Manual"), "k25", JSON, ROUTE),
    ("capture unknown", _p(capture="later"), "k26", JSON, ROUTE),
    ("capture as a bool", _p(capture=True), "k27", JSON, ROUTE),
    ("capture as a number", _p(capture=1), "k28", JSON, ROUTE),
    ("a bool amount", _p(amount_minor=True), "k30", JSON, ROUTE),
    ("a float amount", _raw_amount("500.0"), "k31", JSON, ROUTE),
    ("a huge amount", _raw_amount("1e400"), "k32", JSON, ROUTE),
    ("an amount as text", _p(amount_minor="500"), "k33", JSON, ROUTE),
    ("a zero amount", _p(amount_minor=0), "k34", JSON, ROUTE),
    ("a negative amount", _p(amount_minor=-1), "k35", JSON, ROUTE),
    ("an amount past 2^53-1", _p(amount_minor=AMOUNT_MINOR_MAX + 1), "k36", JSON, ROUTE),
    ("no amount", _p(amount_minor=_GONE), "k37", JSON, ROUTE),
    ("no currency", _p(currency=_GONE), "k38", JSON, ROUTE),
    ("no source", _p(source=_GONE), "k39", JSON, ROUTE),
    ("no destination", _p(destination_account=_GONE), "k40", JSON, ROUTE),
    ("a source as text", _p(source="tok_ok"), "k41", JSON, ROUTE),
    ("a source as a list", _p(source=["card", "tok_ok"]), "k42", JSON, ROUTE),
    ("a source null", _p(source=None), "k43", JSON, ROUTE),
    ("a source of another type", _p(source=_source(type="bank")), "k44", JSON, ROUTE),
    ("a source type null", _p(source=_source(type=None)), "k45", JSON, ROUTE),
    ("a source without its token", _p(source=_source(token=_GONE)), "k46", JSON, ROUTE),
    ("a source without its type", _p(source=_source(type=_GONE)), "k47", JSON, ROUTE),
    ("an extra field in the source", _p(source=_source(cvc="123")), "k48", JSON, ROUTE),
    ("an empty token", _p(source=_source(token="")), "k49", JSON, ROUTE),
    ("a token too long", _p(source=_source(token="t" * 256)), "k50", JSON, ROUTE),
    ("a token as a number", _p(source=_source(token=4242)), "k51", JSON, ROUTE),
    ("a NUL in the token", _p(source=_source(token="tok\x00ok")), "k52", JSON, ROUTE),
    ("a destination too long", _p(destination_account="a" * 65), "k53", JSON, ROUTE),
    ("an empty destination", _p(destination_account=""), "k54", JSON, ROUTE),
    ("a destination as a number", _p(destination_account=7), "k55", JSON, ROUTE),
    ("a currency too long", _p(currency="USDD"), "k56", JSON, ROUTE),
    ("a currency too short", _p(currency="US"), "k57", JSON, ROUTE),
    ("a currency as a number", _p(currency=840), "k58", JSON, ROUTE),
    ("a description too long", _p(description="d" * 1001), "k59", JSON, ROUTE),
    ("a description as a number", _p(description=7), "k60", JSON, ROUTE),
    ("metadata null", _p(metadata=None), "k61", JSON, ROUTE),
    ("a number in metadata", _p(metadata={"a": 1}), "k62", JSON, ROUTE),
    ("metadata past the model's keys", _p(metadata={f"k{i}": "v" for i in range(51)}), "k63", JSON, ROUTE),
    ("a metadata key too long", _p(metadata={"k" * 41: "v"}), "k64", JSON, ROUTE),
    ("an empty metadata key", _p(metadata={"": "v"}), "k65", JSON, ROUTE),
    ("a metadata value too long", _p(metadata={"k": "v" * 501}), "k66", JSON, ROUTE),
    ("metadata as a list", _p(metadata=["a"]), "k67", JSON, ROUTE),
    ("a NUL in a metadata key", _p(metadata={"a\x00": "b"}), "k68", JSON, ROUTE),
    ("an extra field", _p(note="x"), "k69", JSON, ROUTE),
    ("a lone surrogate", _p().replace(b"tok_ok", b"\\ud800"), "k70", JSON, ROUTE),
    ("a repeated field", _p().replace(b"{", b'{"amount_minor": 1, ', 1), "k71", JSON, ROUTE),
    ("a repeated source field", _p().replace(b'"type"', b'"token": "x", "type"', 1), "k72", JSON, ROUTE),
    ("a bad body and no key", _p(amount_minor=True), NO_KEY, JSON, ROUTE),
    ("not JSON", b"{not json", "k73", JSON, ROUTE),
    ("an empty body", b"", "k74", JSON, ROUTE),
    ("a JSON array", b"[]", "k75", JSON, ROUTE),
    ("JSON null", b"null", "k76", JSON, ROUTE),
    ("nested deep", b"[" * 100_000 + b"]" * 100_000, "k77", JSON, ROUTE),
    ("not UTF-8", b'{"currency":"\xff"}', "k78", JSON, ROUTE),
    # The route reads a +json body too: the edge's fingerprint must be the route's, both ways.
    ("a +json type", _p(), "k79", "application/vnd.paycore+json", ROUTE),
    ("the first payment's replay, +json", _p(), "k1", "application/vnd.paycore+json", ROUTE),
    (
        "its replay, +json, defaults written",
        _p(description=None, metadata={}),
        "k2",
        "application/vnd.paycore+json",
        ROUTE,
    ),
    (
        "every optional field's replay, +json",
        _p(description="order 7", metadata={"order": "7"}),
        "k2",
        "application/vnd.paycore+json",
        ROUTE,
    ),
    ("a +json payment's replay at the edge", _p(), "k79", JSON, EDGE),
    ("text/plain", _p(), "k80", "text/plain", NO_ROUTE),
]


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the edge handed to the FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_payments._PaymentsEndpoint)


def _apps(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    # Below the model's 50 keys, so that the settings' bound is the route's refusal to match.
    settings, other_settings = (dataclasses.replace(s, metadata_keys_max=20) for s in (settings, other_settings))
    edge = create_app(settings, database, sandboxes[0])
    return edge, edges.without_edge(other_settings, other_database, money_payments.ROUTE, sandboxes[1])


def _accounts(client: TestClient, **headers: str) -> dict[bytes, bytes]:
    made = {}
    for name, body in ACCOUNTS.items():
        response = client.post("/v1/accounts", json=body, headers=headers)
        assert response.status_code == 201, response.text
        made[f"@{name}".encode()] = response.json()["id"].encode()
    return made


def _answer(
    client: TestClient,
    accounts: dict[bytes, bytes],
    body: bytes,
    key: str | tuple[str, ...],
    content_type: str | None,
    **headers: str,
) -> tuple[Any, ...]:
    return edges.post(client, accounts, PATH, body, key, content_type, **headers)


def test_every_body_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    handed_over: list[str],
) -> None:
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        edge_accounts, route_accounts = _accounts(edge), _accounts(route)
        for name, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = _answer(edge, edge_accounts, body, key, content_type)
            assert answered == _answer(route, route_accounts, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        _, body, key, content_type, _ = CASES[0]  # the first payment, once more after all else
        replayed = _answer(edge, edge_accounts, body, key, content_type)
        assert replayed[:2] == (201, {**replayed[1], "idempotent-replayed": "true"}), replayed
        assert edge.get(PATH).status_code == route.get(PATH).status_code
        assert edge.put(PATH).headers.get("allow") == route.put(PATH).headers.get("allow")
        listed = [client.get(PATH, params={"limit": 100}).json()["data"] for client in (edge, route)]
        assert [(p["amount_minor"], p["status"]) for p in listed[0]] == [
            (p["amount_minor"], p["status"]) for p in listed[1]
        ]
        assert len(listed[0]) > 5
        balances = [
            client.get(f"/v1/accounts/{made[b'@A'].decode()}/balance").json()
            for client, made in ((edge, edge_accounts), (route, route_accounts))
        ]
        assert balances[0] == {**balances[1], "account_id": balances[0]["account_id"]}


def _api_key(database: Database, tenant: str) -> str:
    return database.transaction(lambda connection: tenants.create_tenant(connection, tenant, now_us=now_us())).api_key


def test_with_api_keys_401_and_403_come_as_they_did(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    handed_over: list[str],
) -> None:
    keys = [_api_key(db, name) for db in (database, other[1]) for name in ("acme", "other")]
    with_edge, without = _apps(settings, database, other, sandboxes)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        accounts = (
            _accounts(edge, Authorization=f"Bearer {keys[0]}"),
            _accounts(route, Authorization=f"Bearer {keys[2]}"),
        )
        clients = ((edge, accounts[0], keys[0], keys[1]), (route, accounts[1], keys[2], keys[3]))
        for body, served_by_edge in ((_p(), True), (b'{"amount_minor": true}', False), (b"{no", False)):
            answers = []
            for client, made, own, stranger in clients:
                answers.append(
                    [
                        _answer(client, made, body, "a1", JSON),
                        _answer(client, made, body, "a1", JSON, Authorization="Bearer nope"),
                        _answer(client, made, body, "a1", JSON, Authorization="Basic x"),
                        _answer(client, made, body, "a1", JSON, Authorization=f"Bearer {stranger}"),
                        _answer(client, made, body, "a1", JSON, Authorization=f"Bearer {own}"),
                    ]
                )
            statuses = [status for status, *_ in answers[0]]
            if served_by_edge:  # another tenant's key does not see acme's account: 404
                assert statuses[:3] == [401, 401, 401] and statuses[3] == 404 and statuses[4] == 201, answers[0]
            assert answers[0] == answers[1], body
        assert len(handed_over) == 2 * 5, "each bad body handed over five times"
