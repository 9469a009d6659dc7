"""The thin edges of `POST /v1/payouts` and `POST /v1/payouts/{payout_id}/cancel`
(paycore.http.money.payouts) answer exactly as the FastAPI routes they stand in front of: the
same bodies and headers, good and bad, sent in the same order to an app with the edges and to one
without them (each on its own fresh database, with the same funded accounts made first) get the
same status, headers and JSON body (new ids and times aside). The schedule edge must serve the
well-formed bodies itself and hand every other one to the FastAPI route; the cancel edge reads no
body, as the route reads none, and serves every cancel."""

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
from paycore.http.money import payouts as money_payouts
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import service as tenants
from tests.support import edges

PATH = "/v1/payouts"
JSON, PLUS_JSON = edges.JSON, "application/vnd.paycore+json"
EDGE, ROUTE, NO_ROUTE, NO_KEY = edges.EDGE, edges.ROUTE, edges.NO_ROUTE, edges.NO_KEY
FUNDED_MINOR = 100_000  # on each source account, @U (USD) and @E (EUR)
ACH = {"name": "Ada Lovelace", "routing_number": "110000000", "account_number": "000123456789"}
SEPA = {"name": "Émilie du Châtelet", "iban": "DE89 3704 0044 0532 0130 00", "bic": "COBADEFFXXX"}
_GONE = object()


def _o(**fields: Any) -> bytes:
    """An ACH payout of 1000 USD from @U, with fields changed, added or taken out."""
    body = {
        "amount_minor": 1000,
        "currency": "USD",
        "source_account": "@U",
        "beneficiary": ACH,
        "rail": "ach",
        **fields,
    }
    return json.dumps({name: value for name, value in body.items() if value is not _GONE}).encode()


def _ach(**fields: Any) -> dict[str, Any]:
    beneficiary = {**ACH, **fields}
    return {name: value for name, value in beneficiary.items() if value is not _GONE}


def _sepa(**fields: Any) -> bytes:
    return _o(**{"currency": "EUR", "source_account": "@E", "rail": "sepa", "beneficiary": SEPA, **fields})


# (what it is, body, Idempotency-Key header(s) or NO_KEY, content type, who answers): sent in order.
CASES: list[tuple[str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("first payout", _o(), "k1", JSON, EDGE),
    ("its replay", _o(), "k1", JSON, EDGE),
    ("its key with another body", _o(amount_minor=1001), "k1", JSON, EDGE),
    ("its key with the defaults written out", _o(execute_on=None, metadata={}), "k1", JSON, EDGE),
    ("its key, the beneficiary's defaults written out", _o(beneficiary=_ach(iban=None, bic=None)), "k1", JSON, EDGE),
    # The route reads a +json body too: the edge's fingerprint must be the route's, both ways.
    ("its replay, +json", _o(), "k1", PLUS_JSON, ROUTE),
    ("a +json payout", _o(amount_minor=5), "k2", PLUS_JSON, ROUTE),
    ("the +json payout's replay at the edge", _o(amount_minor=5, metadata={}), "k2", JSON, EDGE),
    ("no Idempotency-Key", _o(), NO_KEY, JSON, EDGE),
    ("a key too long", _o(), "k" * 256, JSON, EDGE),
    ("the key header twice", _o(amount_minor=7), ("k1", "kd"), JSON, EDGE),
    ("every optional field", _o(execute_on="2999-01-01", metadata={"order": "7"}), "k3", JSON, EDGE),
    ("an execute_on not a date", _o(execute_on="tomorrow"), "k4", JSON, EDGE),
    ("an execute_on in the past", _o(execute_on="2000-01-01"), "k5", JSON, EDGE),
    ("a SEPA payout", _sepa(), "k6", JSON, EDGE),
    (
        "a SEPA payout without a BIC",
        _sepa(beneficiary={"name": "É", "iban": "DE89370400440532013000"}),
        "k7",
        JSON,
        EDGE,
    ),
    ("EUR on the ACH rail", _o(currency="EUR", source_account="@E"), "k8", JSON, EDGE),
    ("a currency mismatch", _o(source_account="@E"), "k9", JSON, EDGE),
    ("an unknown currency", _o(currency="XYZ"), "k10", JSON, EDGE),
    ("an unknown account", _o(source_account="acct_nope"), "k11", JSON, EDGE),
    ("more than the source holds", _o(amount_minor=FUNDED_MINOR * 2), "k12", JSON, EDGE),
    ("its replay, refused", _o(amount_minor=FUNDED_MINOR * 2), "k12", JSON, EDGE),
    ("the largest amount", _o(amount_minor=AMOUNT_MINOR_MAX), "k13", JSON, EDGE),
    ("ACH without an account number", _o(beneficiary=_ach(account_number=_GONE)), "k14", JSON, EDGE),
    ("a bad routing number", _o(beneficiary=_ach(routing_number="123")), "k15", JSON, EDGE),
    ("an IBAN on ACH", _o(beneficiary=_ach(iban="DE89370400440532013000")), "k16", JSON, EDGE),
    ("a beneficiary at the model's bounds", _o(beneficiary=_ach(name="n" * 140, bic="B" * 11)), "k17", JSON, EDGE),
    ("metadata past metadata_keys_max", _o(metadata={f"k{i}": "v" for i in range(21)}), "k18", JSON, EDGE),
    ("metadata past metadata_bytes_max", _o(metadata={f"k{i}": "v" * 300 for i in range(20)}), "k19", JSON, EDGE),
    ("metadata at the model's bounds", _o(metadata={"k" * 40: "v" * 500}), "k20", JSON, EDGE),
    ("text beyond ASCII", _o(metadata={"café": "☕ 𝄞"}, beneficiary=_ach(name="Zoë 𝄞")), "k21", JSON, EDGE),
    ("a charset parameter", _o(), "k22", "application/json; charset=utf-8", EDGE),
    ("no content type", _o(), "k23", None, EDGE),
    ("a bool amount", _o(amount_minor=True), "k30", JSON, ROUTE),
    ("a float amount", _o().replace(b"1000", b"1000.0", 1), "k31", JSON, ROUTE),
    ("a huge amount", _o().replace(b"1000", b"1e400", 1), "k32", JSON, ROUTE),
    ("an amount as text", _o(amount_minor="1000"), "k33", JSON, ROUTE),
    ("a zero amount", _o(amount_minor=0), "k34", JSON, ROUTE),
    ("an amount past 2^53-1", _o(amount_minor=AMOUNT_MINOR_MAX + 1), "k35", JSON, ROUTE),
    ("no amount", _o(amount_minor=_GONE), "k36", JSON, ROUTE),
    ("no currency", _o(currency=_GONE), "k37", JSON, ROUTE),
    ("no source", _o(source_account=_GONE), "k38", JSON, ROUTE),
    ("no beneficiary", _o(beneficiary=_GONE), "k39", JSON, ROUTE),
    ("no rail", _o(rail=_GONE), "k40", JSON, ROUTE),
    ("an unknown rail", _o(rail="wire"), "k41", JSON, ROUTE),
    ("a rail null", _o(rail=None), "k42", JSON, ROUTE),
    ("a currency too short", _o(currency="US"), "k43", JSON, ROUTE),
    ("a source too long", _o(source_account="a" * 65), "k44", JSON, ROUTE),
    ("an empty source", _o(source_account=""), "k45", JSON, ROUTE),
    ("an execute_on too long", _o(execute_on="2999-01-011"), "k46", JSON, ROUTE),
    ("an empty execute_on", _o(execute_on=""), "k47", JSON, ROUTE),
    ("an execute_on as a number", _o(execute_on=20990101), "k48", JSON, ROUTE),
    ("a beneficiary as text", _o(beneficiary="Ada"), "k49", JSON, ROUTE),
    ("a beneficiary null", _o(beneficiary=None), "k50", JSON, ROUTE),
    ("a beneficiary without a name", _o(beneficiary=_ach(name=_GONE)), "k51", JSON, ROUTE),
    ("a beneficiary name null", _o(beneficiary=_ach(name=None)), "k52", JSON, ROUTE),
    ("an empty beneficiary name", _o(beneficiary=_ach(name="")), "k53", JSON, ROUTE),
    ("a beneficiary name too long", _o(beneficiary=_ach(name="n" * 141)), "k54", JSON, ROUTE),
    ("a BIC too short", _o(beneficiary=_ach(bic="B" * 7)), "k55", JSON, ROUTE),
    ("an account number too long", _o(beneficiary=_ach(account_number="1" * 18)), "k56", JSON, ROUTE),
    ("a routing number as a number", _o(beneficiary=_ach(routing_number=110000000)), "k57", JSON, ROUTE),
    ("an extra field in the beneficiary", _o(beneficiary=_ach(email="a@b")), "k58", JSON, ROUTE),
    ("a NUL in the beneficiary", _o(beneficiary=_ach(name="A\x00da")), "k59", JSON, ROUTE),
    ("metadata null", _o(metadata=None), "k60", JSON, ROUTE),
    ("a number in metadata", _o(metadata={"a": 1}), "k61", JSON, ROUTE),
    ("metadata past the model's keys", _o(metadata={f"k{i}": "v" for i in range(51)}), "k62", JSON, ROUTE),
    ("a metadata value too long", _o(metadata={"k": "v" * 501}), "k63", JSON, ROUTE),
    ("an extra field", _o(note="x"), "k64", JSON, ROUTE),
    ("a lone surrogate", _o(beneficiary=_ach(name="x")).replace(b'"x"', b'"\\ud800"'), "k65", JSON, ROUTE),
    ("a repeated field", _o().replace(b"{", b'{"rail": "sepa", ', 1), "k66", JSON, ROUTE),
    ("a repeated beneficiary field", _o().replace(b'"name"', b'"bic": "x", "bic": "y", "name"'), "k67", JSON, ROUTE),
    ("a bad body and no key", _o(amount_minor=True), NO_KEY, JSON, ROUTE),
    ("not JSON", b"{not json", "k68", JSON, ROUTE),
    ("an empty body", b"", "k69", JSON, ROUTE),
    ("a JSON array", b"[]", "k70", JSON, ROUTE),
    ("nested deep", b"[" * 100_000 + b"]" * 100_000, "k71", JSON, ROUTE),
    ("not UTF-8", b'{"currency":"\xff"}', "k72", JSON, ROUTE),
    ("text/plain", _o(), "k73", "text/plain", NO_ROUTE),
]


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests either edge handed to a FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_payouts._ScheduleEndpoint, money_payouts._CancelEndpoint)


def _apps(settings: Settings, database: Database, other: tuple[Settings, Database]) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    # Below the model's 50 keys, so that the settings' bound is the route's refusal to match.
    settings, other_settings = (dataclasses.replace(s, metadata_keys_max=20) for s in (settings, other_settings))
    with_edges = create_app(settings, database)
    without = edges.without_edge(other_settings, other_database, money_payouts.ROUTE)
    without.router.routes.remove(money_payouts.CANCEL_ROUTE)
    return with_edges, without


def _funded(client: TestClient, **headers: str) -> dict[bytes, bytes]:
    """@U and @E: a USD and a EUR source account, each holding FUNDED_MINOR."""
    made = {}
    for name, currency in (("U", "USD"), ("E", "EUR")):
        ids = []
        for code, normal_balance in ((f"seller.{name}", "credit"), (f"funding.{name}", "debit")):
            account = {"code": code, "currency": currency, "normal_balance": normal_balance}
            response = client.post("/v1/accounts", json=account, headers=headers)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
        transfer = {"debit_account_id": ids[1], "credit_account_id": ids[0], "amount_minor": FUNDED_MINOR}
        response = client.post(
            "/v1/transfers", json={**transfer, "currency": currency}, headers={"Idempotency-Key": name, **headers}
        )
        assert response.status_code == 201, response.text
        made[f"@{name}".encode()] = ids[0].encode()
    return made


def test_every_body_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    with_edges, without = _apps(settings, database, other)
    with TestClient(with_edges) as edge, TestClient(without) as route:
        edge_made, route_made = _funded(edge), _funded(route)
        for name, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = edges.post(edge, edge_made, PATH, body, key, content_type)
            assert answered == edges.post(route, route_made, PATH, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        _, body, key, content_type, _ = CASES[0]  # the first payout, once more after all else
        replayed = edges.post(edge, edge_made, PATH, body, key, content_type)
        assert replayed[:2] == (201, {**replayed[1], "idempotent-replayed": "true"}), replayed
        listed = [client.get(PATH, params={"limit": 100}).json()["data"] for client in (edge, route)]
        assert [(p["amount_minor"], p["status"]) for p in listed[0]] == [
            (p["amount_minor"], p["status"]) for p in listed[1]
        ]
        assert len(listed[0]) > 5


def _payouts(client: TestClient, made: dict[bytes, bytes], count: int) -> dict[bytes, bytes]:
    """`count` scheduled payouts, named @O0, @O1, ... (with the funded accounts' names)."""
    named = dict(made)
    for number in range(count):
        status, _, text = edges.post(client, made, PATH, _o(amount_minor=10 + number), f"o{number}", JSON)
        assert status == 201, text
        response = client.get(PATH, params={"limit": 100}).json()["data"]
        named[f"@O{number}".encode()] = response[-1]["id"].encode()
    return named


# (what it is, payout, body, Idempotency-Key header(s) or NO_KEY, content type): sent in order.
CANCELS: list[tuple[str, str, bytes, str | tuple[str, ...], str | None]] = [
    ("a cancel", "@O0", b"", "c1", None),
    ("its replay", "@O0", b"", "c1", None),
    ("its key on another payout", "@O1", b"", "c1", None),
    ("a canceled payout, a new key", "@O0", b"", "c2", None),
    ("no Idempotency-Key", "@O1", b"", NO_KEY, None),
    ("a key too long", "@O1", b"", "k" * 256, None),
    ("a body, ignored", "@O1", _o(), "c3", JSON),
    ("a malformed body, ignored", "@O2", b'{"a": 1, "a": 2', "c4", JSON),
    ("its replay, another body", "@O2", b"[]", "c4", JSON),
    ("a +json body", "@O3", b"{}", "c5", PLUS_JSON),
    ("a text/plain body", "@O3", b"x", "c6", "text/plain"),
    ("an unknown payout", "po_nope", b"", "c7", None),
    ("an empty id", "", b"", "c8", None),
]


def test_every_cancel_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    with_edges, without = _apps(settings, database, other)
    with TestClient(with_edges) as edge, TestClient(without) as route:
        edge_made, route_made = (_payouts(client, _funded(client), 5) for client in (edge, route))
        for name, payout, body, key, content_type in CANCELS:
            path = f"{PATH}/{payout}/cancel"
            answered = edges.post(edge, edge_made, path, body, key, content_type)
            assert answered == edges.post(route, route_made, path, body, key, content_type), name
        assert handed_over == [], "the cancel edge answers every cancel"
        statuses = [client.get(PATH, params={"limit": 100}).json()["data"] for client in (edge, route)]
        assert [p["status"] for p in statuses[0]] == [p["status"] for p in statuses[1]]
        assert [p["status"] for p in statuses[0]] == ["canceled"] * 4 + ["scheduled"]


def _api_key(database: Database, tenant: str) -> str:
    return database.transaction(lambda connection: tenants.create_tenant(connection, tenant, now_us=now_us())).api_key


def test_with_api_keys_401_and_404_come_as_they_did(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    keys = [_api_key(db, name) for db in (database, other[1]) for name in ("acme", "other")]
    with_edges, without = _apps(settings, database, other)
    with TestClient(with_edges) as edge, TestClient(without) as route:
        made = (
            _payouts(edge, _funded(edge, Authorization=f"Bearer {keys[0]}"), 0),
            _payouts(route, _funded(route, Authorization=f"Bearer {keys[2]}"), 0),
        )
        clients = ((edge, made[0], keys[0], keys[1]), (route, made[1], keys[2], keys[3]))
        # (path, body, key, the status with the tenant's own key; None: a bad body, handed over)
        requests: list[tuple[str, bytes, str, int | None]] = [
            (PATH, _o(), "a1", 201),
            (PATH, b'{"amount_minor": true}', "a1", None),
            (f"{PATH}/po_x/cancel", b"", "a2", 404),
        ]
        for path, body, key, own_status in requests:
            answers = []
            for client, names, own, stranger in clients:
                answers.append(
                    [
                        edges.post(client, names, path, body, key, JSON),
                        edges.post(client, names, path, body, key, JSON, Authorization="Bearer nope"),
                        edges.post(client, names, path, body, key, JSON, Authorization="Basic x"),
                        edges.post(client, names, path, body, key, JSON, Authorization=f"Bearer {stranger}"),
                        edges.post(client, names, path, body, key, JSON, Authorization=f"Bearer {own}"),
                    ]
                )
            statuses = [status for status, *_ in answers[0]]
            if own_status is not None:  # another tenant's key does not see acme's account or payout: 404
                assert statuses == [401, 401, 401, 404, own_status], answers[0]
            assert answers[0] == answers[1], (path, body)
        assert len(handed_over) == 5, "the bad body handed over five times"
