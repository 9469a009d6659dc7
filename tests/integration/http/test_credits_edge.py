"""The thin edge of `POST /v1/tenants/{tenant_id}/credits` (paycore.http.money.credits) answers
exactly as the FastAPI route it stands in front of: the same bodies, good and bad, posted in the
same order to an app with the edge and to one without it (each on its own fresh database) get
the same status, headers and JSON body (a credit's new id and time aside). The edge must serve
the well-formed bodies itself and hand every other one to the FastAPI route."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import credits as money_credits
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import service as tenants
from tests.support import edges

PATH = "/v1/tenants/acme/credits"
NEW_ID = re.compile(r"\b(acct|cr|txn|ent)_[0-9A-Z]{26}\b")
JSON = "application/json"


def _line(**changed: Any) -> dict[str, Any]:
    return {"desc": "bonus", "amount_minor": 199, "currency": "USD", **changed}


def _credit(key: str = "k1", *lines: dict[str, Any], **changed: Any) -> bytes:
    return json.dumps({"idempotency_key": key, "lines": list(lines) or [_line()], **changed}).encode()


def _raw(key: str, desc_json: str, amount_json: str) -> bytes:
    """A credit with its desc and amount written as JSON text (what `json.dumps` would not write)."""
    line = f'{{"desc":{desc_json},"amount_minor":{amount_json},"currency":"USD"}}'
    return f'{{"idempotency_key":"{key}","lines":[{line}]}}'.encode()


# Who answers a case: the edge itself; the FastAPI route, handed the body by the edge; or the
# middleware, before any route (BodyLimit's 415 for a body that is not JSON). Counted as the
# number of hand-overs to the FastAPI route.
EDGE, ROUTE, NO_ROUTE = 0, 1, 0
# (what it is, body, content type, who answers): posted in order, on one database.
CASES: list[tuple[str, bytes, str | None, int]] = [
    ("first credit", _credit("k1"), JSON, EDGE),
    ("its replay", _credit("k1"), JSON, EDGE),
    ("its key reused with another body", _credit("k1", _line(amount_minor=200)), JSON, EDGE),
    ("two lines", _credit("k2", _line(desc="a", amount_minor=100), _line(desc="b", amount_minor=99)), JSON, EDGE),
    ("text beyond ASCII", _credit("k3", _line(desc="café ☕ 𝄞")), JSON, EDGE),
    ("bounds reached", _credit("k" * 255, _line(desc="d" * 500, amount_minor=1)), JSON, EDGE),
    ("the largest amount", _credit("k4", _line(amount_minor=AMOUNT_MINOR_MAX)), JSON, EDGE),
    ("a currency not enabled", _credit("k5", _line(currency="EUR")), JSON, EDGE),
    ("a currency in lower case", _credit("k6", _line(currency="usd")), JSON, EDGE),
    ("an empty currency", _credit("k7", _line(currency="")), JSON, EDGE),
    ("a key the key rule refuses", _credit("k é"), JSON, EDGE),
    ("a key of spaces", _credit("   "), JSON, EDGE),
    ("a charset parameter", _credit("k8"), "application/json; charset=utf-8", EDGE),
    ("no content type", _credit("k9"), None, EDGE),
    ("lines past lines_max", _credit("k10", *[_line(amount_minor=1)] * 101), JSON, EDGE),
    ("a repeated key", b'{"idempotency_key": "k11", "idempotency_key": "k12", "lines": []}', JSON, ROUTE),
    ("a repeated key in a line", b'{"idempotency_key":"k13","lines":[{"desc":"a","desc":"b"}]}', JSON, ROUTE),
    ("a bool amount", _credit("k14", _line(amount_minor=True)), JSON, ROUTE),
    ("a float amount", _raw("k15", '"a"', "1.0"), JSON, ROUTE),
    ("an amount as text", _credit("k16", _line(amount_minor="199")), JSON, ROUTE),
    ("a null amount", _credit("k17", _line(amount_minor=None)), JSON, ROUTE),
    ("a zero amount", _credit("k18", _line(amount_minor=0)), JSON, ROUTE),
    ("a negative amount", _credit("k19", _line(amount_minor=-1)), JSON, ROUTE),
    ("an amount past 2^53-1", _credit("k20", _line(amount_minor=AMOUNT_MINOR_MAX + 1)), JSON, ROUTE),
    ("a huge amount", _raw("k21", '"a"', "1e400"), JSON, ROUTE),
    ("no lines", json.dumps({"idempotency_key": "k22"}).encode(), JSON, ROUTE),
    ("no key", json.dumps({"lines": [_line()]}).encode(), JSON, ROUTE),
    ("empty lines", _credit("k23", lines=[]), JSON, ROUTE),
    ("an extra field", _credit("k24", note="x"), JSON, ROUTE),
    ("an extra field in a line", _credit("k25", _line(note="x")), JSON, ROUTE),
    ("a line missing its currency", _credit("k26", {"desc": "a", "amount_minor": 1}), JSON, ROUTE),
    ("lines as an object", _credit("k27", lines={"a": 1}), JSON, ROUTE),
    ("a line as a list", _credit("k28", lines=[[1]]), JSON, ROUTE),
    ("a key too long", _credit("k" * 256), JSON, ROUTE),
    ("an empty key", _credit(""), JSON, ROUTE),
    ("a number as key", _credit("k", idempotency_key=12), JSON, ROUTE),
    ("a desc too long", _credit("k29", _line(desc="d" * 501)), JSON, ROUTE),
    ("a currency too long", _credit("k30", _line(currency="USDUSDUSD")), JSON, ROUTE),
    ("a NUL in a desc", _credit("k31", _line(desc="a\x00b")), JSON, ROUTE),
    ("a NUL in the key", _credit("k\x00"), JSON, ROUTE),
    ("a lone surrogate", _raw("k32", '"\\ud800"', "1"), JSON, ROUTE),
    ("a desc as a number", _credit("k33", _line(desc=5)), JSON, ROUTE),
    ("not JSON", b"{not json", JSON, ROUTE),
    ("an empty body", b"", JSON, ROUTE),
    ("a JSON array", b"[]", JSON, ROUTE),
    ("JSON null", b"null", JSON, ROUTE),
    ("nested deep", b"[" * 100_000 + b"]" * 100_000, JSON, ROUTE),
    ("a byte order mark", b"\xef\xbb\xbf" + _credit("k34"), JSON, EDGE),
    ("UTF-16", _credit("k35").decode().encode("utf-16"), JSON, EDGE),
    ("not UTF-8", b'{"idempotency_key":"\xff","lines":[]}', JSON, ROUTE),
    ("text/plain", _credit("k36"), "text/plain", NO_ROUTE),
    ("a +json type", _credit("k37"), "application/vnd.paycore+json", ROUTE),
    ("a form", b"idempotency_key=k38", "application/x-www-form-urlencoded", NO_ROUTE),
]


def _without_edge(settings: Settings, database: Database) -> FastAPI:
    return edges.without_edge(settings, database, money_credits.ROUTE)


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the edge handed to the FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_credits._CreditsEndpoint)


def _answer(client: TestClient, path: str, body: bytes, content_type: str | None, **headers: str) -> tuple[Any, ...]:
    sent = {"X-Request-Id": "same-id", **headers}
    if content_type is not None:
        sent["Content-Type"] = content_type
    response = client.post(path, content=body, headers=sent)
    shown = dict(response.headers)
    try:
        payload: Any = response.json()
    except ValueError:
        payload = response.text
    if isinstance(payload, dict) and response.status_code in (200, 201):
        assert payload.keys() >= {"id", "created_at"}, payload
        payload = {**payload, "id": "<new id>", "created_at": "<now>"}
    # An id a database made (a refusal may name an account) differs from one database to the other.
    return response.status_code, shown, NEW_ID.sub("<id>", json.dumps(payload))


def test_every_body_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    other_settings, other_database = other
    with (
        TestClient(create_app(settings, database)) as edge,
        TestClient(_without_edge(other_settings, other_database)) as route,
    ):
        for name, body, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = _answer(edge, PATH, body, content_type)
            assert answered == _answer(route, PATH, body, content_type), name
            assert len(handed_over) == before + hand_overs, name
        for path in ("/v1/tenants/bad%20tenant/credits", "/v1/tenants/" + "t" * 65 + "/credits"):
            assert _answer(edge, path, _credit("k40"), JSON) == _answer(route, path, _credit("k40"), JSON), path
        assert edge.get(PATH).status_code == route.get(PATH).status_code == 405
        assert edge.get(PATH).headers["allow"] == route.get(PATH).headers["allow"]


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
        clients = ((edge, keys[0], keys[1]), (route, keys[2], keys[3]))
        for body, served_by_edge in ((_credit("k1"), True), (b'{"lines": 1}', False), (b"{no", False)):
            answers = []
            for client, own, stranger in clients:
                answers.append(
                    [
                        _answer(client, PATH, body, JSON),
                        _answer(client, PATH, body, JSON, Authorization="Bearer nope"),
                        _answer(client, PATH, body, JSON, Authorization="Basic x"),
                        _answer(client, PATH, body, JSON, Authorization=f"Bearer {stranger}"),
                        _answer(client, PATH, body, JSON, Authorization=f"Bearer {own}"),
                    ]
                )
            statuses = [status for status, *_ in answers[0]]
            if served_by_edge:  # a body FastAPI cannot read is its 400 first, as it always was
                assert statuses == [401, 401, 401, 403, 201], answers[0]
            assert answers[0] == answers[1], body
        assert len(handed_over) == 2 * 5, "each bad body handed over five times"
