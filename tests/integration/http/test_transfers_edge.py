"""The thin edge of `POST /v1/transfers` (paycore.http.money.transfers) answers exactly as the
FastAPI route it stands in front of: the same bodies and headers, good and bad, sent in the same
order to an app with the edge and to one without it (each on its own fresh database, with the
same accounts made first) get the same status, headers and JSON body (new ids and times aside).
The edge must serve the well-formed bodies itself and hand every other one to the FastAPI route."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import transfers as money_transfers
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import service as tenants
from tests.support import edges

PATH = "/v1/transfers"
NEW_ID = re.compile(r"\b[a-z]{2,8}_[0-9A-Z]{26}\b")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
JSON = "application/json"
FUTURE = "2999-01-01T00:00:00Z"
# The accounts each app's database gets first, in this order; a body names them as @A, @B, ...
ACCOUNTS = {
    "A": {"code": "cash", "currency": "USD", "normal_balance": "debit"},
    "B": {"code": "revenue", "currency": "USD", "normal_balance": "credit"},
    "C": {"code": "euro", "currency": "EUR", "normal_balance": "debit"},
    "D": {"code": "wallet", "currency": "USD", "normal_balance": "credit", "no_overdraft": True},
}


def _t(**fields: Any) -> bytes:
    """A simple transfer from @A's side (debit @A, credit @B), with fields changed or added."""
    body = {"debit_account_id": "@A", "credit_account_id": "@B", "amount_minor": 500, "currency": "USD", **fields}
    return json.dumps({name: value for name, value in body.items() if value is not _GONE}).encode()


_GONE = object()


def _e(account: str, direction: str, amount_minor: Any = 300, **extra: Any) -> dict[str, Any]:
    return {"account_id": account, "direction": direction, "amount_minor": amount_minor, **extra}


def _entries(*entries: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({"entries": list(entries), **fields}).encode()


def _raw_amount(amount_json: str) -> bytes:
    return (
        f'{{"debit_account_id":"@A","credit_account_id":"@B","amount_minor":{amount_json},"currency":"USD"}}'.encode()
    )


# Who answers a case: the edge itself, or the FastAPI route handed the body by the edge (or the
# middleware before any route: BodyLimit's 415), as the number of hand-overs to the route.
EDGE, ROUTE, NO_ROUTE = 0, 1, 0
NO_KEY = ""
# (what it is, body, Idempotency-Key header(s) or NO_KEY, content type, who answers): sent in order.
CASES: list[tuple[str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("first transfer", _t(), "k1", JSON, EDGE),
    ("its replay", _t(), "k1", JSON, EDGE),
    ("its key with another body", _t(amount_minor=501), "k1", JSON, EDGE),
    ("its key with a default written out", _t(pending=False, metadata={}), "k1", JSON, EDGE),
    ("no Idempotency-Key", _t(), NO_KEY, JSON, EDGE),
    ("a key with a space", _t(), "k x", JSON, EDGE),
    ("the key header twice", _t(amount_minor=7), ("k1", "kd"), JSON, EDGE),
    ("the key header twice, a new key first", _t(amount_minor=7), ("kd", "k1"), JSON, EDGE),
    ("a key too long", _t(), "k" * 256, JSON, EDGE),
    ("every optional field", _t(metadata={"a": "b"}, reference_type="payment", reference_id="p1"), "k2", JSON, EDGE),
    ("pending with an expiry", _t(pending=True, expires_at=FUTURE), "k3", JSON, EDGE),
    ("pending without one", _t(pending=True), "k4", JSON, EDGE),
    ("an expiry on a posted transfer", _t(expires_at=FUTURE), "k5", JSON, EDGE),
    ("an expiry in the past", _t(pending=True, expires_at="2000-01-01T00:00:00Z"), "k6", JSON, EDGE),
    ("an expiry not RFC 3339", _t(pending=True, expires_at="tomorrow"), "k7", JSON, EDGE),
    ("explicit nulls", _t(expires_at=None, reference_id=None, entries=None), "k8", JSON, EDGE),
    ("two entries", _entries(_e("@A", "debit"), _e("@B", "credit")), "k9", JSON, EDGE),
    ("three entries", _entries(_e("@A", "debit", 2), _e("@B", "credit", 1), _e("@D", "credit", 1)), "k10", JSON, EDGE),
    ("one entry", _entries(_e("@A", "debit")), "k11", JSON, EDGE),
    ("no entries", _entries(), "k12", JSON, EDGE),
    ("unbalanced entries", _entries(_e("@A", "debit", 2), _e("@B", "credit", 1)), "k13", JSON, EDGE),
    ("entries and the simple shape", _t(entries=[_e("@A", "debit"), _e("@B", "credit")]), "k14", JSON, EDGE),
    ("an unknown account", _t(debit_account_id="acct_nope"), "k15", JSON, EDGE),
    ("a currency mismatch", _t(credit_account_id="@C"), "k16", JSON, EDGE),
    ("an unknown currency", _t(currency="XYZ"), "k17", JSON, EDGE),
    ("the same account twice", _t(credit_account_id="@A"), "k18", JSON, EDGE),
    ("an overdraft", _t(debit_account_id="@D", amount_minor=10**6), "k19", JSON, EDGE),
    ("the largest amount", _t(amount_minor=AMOUNT_MINOR_MAX), "k20", JSON, EDGE),
    ("no amount", _t(amount_minor=_GONE), "k21", JSON, EDGE),
    ("no currency", _t(currency=_GONE), "k22", JSON, EDGE),
    ("no debit account", _t(debit_account_id=_GONE), "k23", JSON, EDGE),
    ("metadata past metadata_keys_max", _t(metadata={f"k{i}": "v" for i in range(21)}), "k24", JSON, EDGE),
    ("metadata past metadata_bytes_max", _t(metadata={f"k{i}": "v" * 300 for i in range(20)}), "k25", JSON, EDGE),
    ("metadata at the model's bounds", _t(metadata={"k" * 40: "v" * 500}), "k26", JSON, EDGE),
    ("text beyond ASCII", _t(metadata={"café": "☕ 𝄞"}, reference_id="ré"), "k27", JSON, EDGE),
    ("a charset parameter", _t(), "k28", "application/json; charset=utf-8", EDGE),
    ("no content type", _t(), "k29", None, EDGE),
    ("a bool amount", _t(amount_minor=True), "k30", JSON, ROUTE),
    ("a float amount", _raw_amount("500.0"), "k31", JSON, ROUTE),
    ("a huge amount", _raw_amount("1e400"), "k32", JSON, ROUTE),
    ("an amount as text", _t(amount_minor="500"), "k33", JSON, ROUTE),
    ("a zero amount", _t(amount_minor=0), "k34", JSON, ROUTE),
    ("a negative amount", _t(amount_minor=-1), "k35", JSON, ROUTE),
    ("an amount past 2^53-1", _t(amount_minor=AMOUNT_MINOR_MAX + 1), "k36", JSON, ROUTE),
    ("a bool amount in an entry", _entries(_e("@A", "debit", True), _e("@B", "credit", 1)), "k37", JSON, ROUTE),
    ("a float amount in an entry", _entries(_e("@A", "debit", 1.5), _e("@B", "credit", 1)), "k38", JSON, ROUTE),
    ("an unknown direction", _entries(_e("@A", "up"), _e("@B", "credit")), "k39", JSON, ROUTE),
    ("an extra field in an entry", _entries(_e("@A", "debit", note=1), _e("@B", "credit")), "k40", JSON, ROUTE),
    ("an entry missing its amount", _entries({"account_id": "@A", "direction": "debit"}), "k41", JSON, ROUTE),
    ("entries as an object", _t(entries={"a": 1}), "k42", JSON, ROUTE),
    ("pending as text", _t(pending="true"), "k43", JSON, ROUTE),
    ("pending as a number", _t(pending=1), "k44", JSON, ROUTE),
    ("pending null", _t(pending=None), "k45", JSON, ROUTE),
    ("metadata null", _t(metadata=None), "k46", JSON, ROUTE),
    ("a number in metadata", _t(metadata={"a": 1}), "k47", JSON, ROUTE),
    ("metadata past the model's keys", _t(metadata={f"k{i}": "v" for i in range(51)}), "k48", JSON, ROUTE),
    ("a metadata key too long", _t(metadata={"k" * 41: "v"}), "k49", JSON, ROUTE),
    ("an empty metadata key", _t(metadata={"": "v"}), "k50", JSON, ROUTE),
    ("a metadata value too long", _t(metadata={"k": "v" * 501}), "k51", JSON, ROUTE),
    ("metadata as a list", _t(metadata=["a"]), "k52", JSON, ROUTE),
    ("an unknown reference type", _t(reference_type="gift"), "k53", JSON, ROUTE),
    ("a null reference type", _t(reference_type=None), "k54", JSON, ROUTE),
    ("an empty reference id", _t(reference_id=""), "k55", JSON, ROUTE),
    ("an account id too long", _t(debit_account_id="a" * 65), "k56", JSON, ROUTE),
    ("an account id as a number", _t(debit_account_id=7), "k57", JSON, ROUTE),
    ("a currency too long", _t(currency="USDD"), "k58", JSON, ROUTE),
    ("an expiry as a number", _t(pending=True, expires_at=1), "k59", JSON, ROUTE),
    ("an extra field", _t(note="x"), "k60", JSON, ROUTE),
    ("a NUL in metadata", _t(metadata={"a": "b\x00"}), "k61", JSON, ROUTE),
    ("a lone surrogate", b'{"debit_account_id":"\\ud800","amount_minor":1}', "k62", JSON, ROUTE),
    ("a repeated field", b'{"amount_minor": 1, "amount_minor": 2}', "k63", JSON, ROUTE),
    ("a repeated metadata key", b'{"metadata": {"a": "b", "a": "c"}}', "k64", JSON, ROUTE),
    ("a bad body and no key", _t(amount_minor=True), NO_KEY, JSON, ROUTE),
    ("not JSON", b"{not json", "k65", JSON, ROUTE),
    ("an empty body", b"", "k66", JSON, ROUTE),
    ("a JSON array", b"[]", "k67", JSON, ROUTE),
    ("JSON null", b"null", "k68", JSON, ROUTE),
    ("nested deep", b"[" * 100_000 + b"]" * 100_000, "k69", JSON, ROUTE),
    ("not UTF-8", b'{"currency":"\xff"}', "k70", JSON, ROUTE),
    ("a +json type", _t(), "k71", "application/vnd.paycore+json", ROUTE),
    # The route reads a +json body too: the edge's fingerprint must be the route's, both ways.
    ("the first transfer's replay, +json", _t(), "k1", "application/vnd.paycore+json", ROUTE),
    ("a +json transfer's replay at the edge", _t(pending=False, metadata={}), "k71", JSON, EDGE),
    ("text/plain", _t(), "k72", "text/plain", NO_ROUTE),
]


def _without_edge(settings: Settings, database: Database) -> FastAPI:
    return edges.without_edge(settings, database, money_transfers.ROUTE)


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the edge handed to the FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_transfers._TransfersEndpoint)


def _accounts(client: TestClient, **headers: str) -> dict[bytes, bytes]:
    return edges.make_accounts(client, ACCOUNTS, **headers)


def _answer(
    client: TestClient,
    accounts: dict[bytes, bytes],
    body: bytes,
    key: str | tuple[str, ...],
    content_type: str | None,
    **headers: str,
) -> tuple[Any, ...]:
    for name, account_id in accounts.items():
        body = body.replace(name, account_id)
    sent = [("X-Request-Id", "same-id"), *headers.items()]
    sent += [("Idempotency-Key", one) for one in ((key,) if isinstance(key, str) else key) if one != NO_KEY]
    if content_type is not None:
        sent.append(("Content-Type", content_type))
    response = client.post(PATH, content=body, headers=sent)
    # Ids and times a database made differ from one database to the other.
    return response.status_code, dict(response.headers), TIME.sub("<time>", NEW_ID.sub("<id>", response.text))


def test_every_body_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    other_settings, other_database = other
    # Below the model's 50 keys, so that the settings' bound is the route's refusal to match.
    settings, other_settings = (dataclasses.replace(s, metadata_keys_max=20) for s in (settings, other_settings))
    with (
        TestClient(create_app(settings, database)) as edge,
        TestClient(_without_edge(other_settings, other_database)) as route,
    ):
        edge_accounts, route_accounts = _accounts(edge), _accounts(route)
        for name, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = _answer(edge, edge_accounts, body, key, content_type)
            assert answered == _answer(route, route_accounts, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        _, body, key, content_type, _ = CASES[0]  # the first transfer, once more after all else
        replayed = _answer(edge, edge_accounts, body, key, content_type)
        assert replayed[:2] == (201, {**replayed[1], "idempotent-replayed": "true"}), replayed
        assert edge.get(PATH).status_code == route.get(PATH).status_code
        assert edge.get(PATH).headers.get("allow") == route.get(PATH).headers.get("allow")
        assert (
            edge.get(f"/v1/accounts/{edge_accounts[b'@B'].decode()}/balance").json()["posted_minor"]
            == (route.get(f"/v1/accounts/{route_accounts[b'@B'].decode()}/balance").json()["posted_minor"])
        )


def _api_key(database: Database, tenant: str) -> str:
    return database.transaction(lambda connection: tenants.create_tenant(connection, tenant, now_us=now_us())).api_key


def test_with_api_keys_401_and_403_come_as_they_did(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    other_settings, other_database = other
    keys = [_api_key(db, name) for db in (database, other_database) for name in ("acme", "other")]
    with (
        TestClient(create_app(settings, database)) as edge,
        TestClient(_without_edge(other_settings, other_database)) as route,
    ):
        accounts = (
            _accounts(edge, Authorization=f"Bearer {keys[0]}"),
            _accounts(route, Authorization=f"Bearer {keys[2]}"),
        )
        clients = ((edge, accounts[0], keys[0], keys[1]), (route, accounts[1], keys[2], keys[3]))
        for body, served_by_edge in ((_t(), True), (b'{"amount_minor": true}', False), (b"{no", False)):
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
            if served_by_edge:  # another tenant's key does not see acme's accounts: 404
                assert statuses[:3] == [401, 401, 401] and statuses[4] == 201, answers[0]
            assert answers[0] == answers[1], body
        assert len(handed_over) == 2 * 5, "each bad body handed over five times"
