"""The thin edges of `POST /v1/transfers/{transfer_id}/post`, `/void` and `/reverse`
(paycore.http.money.transfer_operations) answer exactly as the FastAPI routes they stand in front
of: the same requests, good and bad, sent in the same order to an app with the edges and to one
without them (each on its own fresh database, with the same accounts and transfers made first)
get the same status, headers and JSON body (new ids and times aside), and leave the same
balances. A post and a reversal must serve an absent or well-formed body themselves and hand
every other one to the FastAPI route (ADR 0017: a bool, a float, a number as text, a repeated
key, an extra field, `amount_minor: null` refused there, as ever); a void reads no body, as its
route reads none, and serves every void."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import transfer_operations as money_operations
from paycore.kit.money import AMOUNT_MINOR_MAX
from tests.support import edges

JSON, PLUS_JSON = edges.JSON, "application/vnd.paycore+json"
EDGE, ROUTE, NO_KEY = edges.EDGE, edges.ROUTE, edges.NO_KEY
ACCOUNTS = {
    "A": {"code": "cash", "currency": "USD", "normal_balance": "debit"},
    "B": {"code": "revenue", "currency": "USD", "normal_balance": "credit"},
}
HOLDS, TRANSFERS = ("H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8"), ("T1", "T2", "T3")


def _p(name: str) -> str:
    return f"/v1/transfers/@{name}/post"


def _v(name: str) -> str:
    return f"/v1/transfers/@{name}/void"


def _r(name: str) -> str:
    return f"/v1/transfers/@{name}/reverse"


def _amount(value: Any) -> bytes:
    return json.dumps({"amount_minor": value}).encode()


def _metadata(value: Any) -> bytes:
    return json.dumps({"metadata": value}).encode()


# (what it is, path, body, Idempotency-Key header(s) or NO_KEY, content type, hand-overs): in
# order. @H1..@H8: holds of 1000 from @A to @B; @T1..@T3: transfers of 500.
CASES: list[tuple[str, str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("a post, no body", _p("H1"), b"", "p1", None, EDGE),
    ("its replay", _p("H1"), b"", "p1", None, EDGE),
    ("its key with an amount", _p("H1"), _amount(5), "p1", JSON, EDGE),
    ("a posted hold, a new key", _p("H1"), b"", "p2", None, EDGE),
    ("a post of part", _p("H2"), _amount(300), "p3", JSON, EDGE),
    ("its replay", _p("H2"), _amount(300), "p3", JSON, EDGE),
    ("its replay, +json", _p("H2"), _amount(300), "p3", PLUS_JSON, ROUTE),
    ("a post of {}", _p("H3"), b"{}", "p4", JSON, EDGE),
    ("its replay, no content type", _p("H3"), b"{}", "p4", None, EDGE),
    ("more than the hold", _p("H4"), _amount(1001), "p5", JSON, EDGE),
    ("its replay, refused", _p("H4"), _amount(1001), "p5", JSON, EDGE),
    ("an empty body with a content type", _p("H5"), b"", "p6", JSON, EDGE),
    ("a charset parameter", _p("H6"), _amount(10), "p7", "application/json; charset=utf-8", EDGE),
    ("an unknown transfer", "/v1/transfers/txn_nope/post", b"", "p8", None, EDGE),
    ("no Idempotency-Key", _p("H4"), b"", NO_KEY, None, EDGE),
    ("a key with a space", _p("H4"), b"", "p x", None, EDGE),
    ("a transfer posted", _p("T1"), b"", "p9", None, EDGE),
    ("an amount null", _p("H4"), _amount(None), "p10", JSON, ROUTE),
    ("an amount null, no key", _p("H4"), _amount(None), NO_KEY, JSON, ROUTE),
    ("a bool amount", _p("H4"), _amount(True), "p11", JSON, ROUTE),
    ("a float amount", _p("H4"), b'{"amount_minor": 10.0}', "p12", JSON, ROUTE),
    ("an amount as text", _p("H4"), _amount("10"), "p13", JSON, ROUTE),
    ("a zero amount", _p("H4"), _amount(0), "p14", JSON, ROUTE),
    ("a negative amount", _p("H4"), _amount(-1), "p15", JSON, ROUTE),
    ("an amount past 2^53-1", _p("H4"), _amount(AMOUNT_MINOR_MAX + 1), "p16", JSON, ROUTE),
    ("an extra field", _p("H4"), b'{"amount_minor": 10, "note": "x"}', "p17", JSON, ROUTE),
    ("a repeated field", _p("H4"), b'{"amount_minor": 1, "amount_minor": 2}', "p18", JSON, ROUTE),
    ("not JSON", _p("H4"), b"{not json", "p19", JSON, ROUTE),
    ("a JSON array", _p("H4"), b"[]", "p20", JSON, ROUTE),
    ("JSON null: no body, the whole hold", _p("H7"), b"null", "p21", JSON, ROUTE),
    ("a bad body, an unknown transfer", "/v1/transfers/txn_nope/post", _amount(0), "p22", JSON, ROUTE),
    ("a void", _v("H4"), b"", "v1", None, EDGE),
    ("its replay", _v("H4"), b"", "v1", None, EDGE),
    ("a voided hold, a new key", _v("H4"), b"", "v2", None, EDGE),
    ("a void with a body (ignored)", _v("H6"), b"{not json", "v3", JSON, EDGE),
    ("a void of a posted hold", _v("H1"), b"", "v4", None, EDGE),
    ("a void of a transfer", _v("T1"), b"", "v5", None, EDGE),
    ("a void of an unknown transfer", "/v1/transfers/txn_nope/void", b"", "v6", None, EDGE),
    ("a void without a key", _v("H8"), b"", NO_KEY, None, EDGE),
    ("a post of a voided hold", _p("H4"), b"", "p23", None, EDGE),
    ("a reversal, no body", _r("T1"), b"", "r1", None, EDGE),
    ("its replay", _r("T1"), b"", "r1", None, EDGE),
    ("its key with metadata", _r("T1"), _metadata({"why": "x"}), "r1", JSON, EDGE),
    ("a reversed transfer, a new key", _r("T1"), b"", "r2", None, EDGE),
    ("a reversal with metadata", _r("T2"), _metadata({"why": "refund", "ticket": "t-1"}), "r3", JSON, EDGE),
    ("a reversal of {}", _r("T3"), b"{}", "r4", JSON, EDGE),
    ("a posted hold reversed", _r("H2"), _metadata(None), "r5", JSON, EDGE),
    ("a voided hold reversed", _r("H4"), b"", "r6", None, EDGE),
    ("a pending hold reversed", _r("H8"), b"", "r7", None, EDGE),
    ("an unknown transfer reversed", "/v1/transfers/txn_nope/reverse", b"", "r8", None, EDGE),
    ("a reversal without a key", _r("H3"), b"", NO_KEY, None, EDGE),
    ("metadata of a number", _r("H3"), _metadata({"n": 1}), "r9", JSON, ROUTE),
    ("metadata as text", _r("H3"), _metadata("x"), "r10", JSON, ROUTE),
    ("metadata as a list", _r("H3"), _metadata([]), "r11", JSON, ROUTE),
    ("an extra field", _r("H3"), b'{"metadata": {}, "note": "x"}', "r12", JSON, ROUTE),
    ("a repeated field", _r("H3"), b'{"metadata": {}, "metadata": {}}', "r13", JSON, ROUTE),
    ("not JSON", _r("H3"), b"{not json", "r14", JSON, ROUTE),
    ("a NUL in metadata", _r("H3"), _metadata({"k": "a\u0000b"}), "r15", JSON, ROUTE),
    ("the posted hold reversed again", _r("H2"), b"", "r16", None, EDGE),
]


def _apps(settings: Settings, database: Database, other: tuple[Settings, Database]) -> tuple[FastAPI, FastAPI]:
    other_settings, other_database = other
    edge = create_app(settings, database)
    without = edges.without_edge(other_settings, other_database, money_operations.POST_ROUTE)
    without.router.routes.remove(money_operations.VOID_ROUTE)
    without.router.routes.remove(money_operations.REVERSE_ROUTE)
    return edge, without


def _made(client: TestClient) -> dict[bytes, bytes]:
    """The accounts (@A, @B), the holds (@H1..) and the transfers (@T1..), by name."""
    made = edges.make_accounts(client, ACCOUNTS)
    for name in HOLDS + TRANSFERS:
        transfer = {
            "debit_account_id": made[b"@A"].decode(),
            "credit_account_id": made[b"@B"].decode(),
            "amount_minor": 1000 if name in HOLDS else 500,
            "currency": "USD",
            "pending": name in HOLDS,
        }
        response = client.post("/v1/transfers", json=transfer, headers={"Idempotency-Key": f"make-{name}"})
        assert response.status_code == 201, response.text
        made[f"@{name}".encode()] = response.json()["id"].encode()
    return made


def test_every_request_is_answered_as_the_fastapi_routes_answer_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    handed_over = edges.count_hand_overs(
        monkeypatch, money_operations._PostEndpoint, money_operations._VoidEndpoint, money_operations._ReverseEndpoint
    )
    with_edge, without = _apps(settings, database, other)
    with TestClient(with_edge) as edge, TestClient(without) as route:
        edge_made, route_made = _made(edge), _made(route)
        for name, path, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = edges.post(edge, edge_made, path, body, key, content_type)
            assert answered == edges.post(route, route_made, path, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        balances = [
            [edges.mask(client.get(f"/v1/accounts/{made[name].decode()}/balance").text) for name in (b"@A", b"@B")]
            for client, made in ((edge, edge_made), (route, route_made))
        ]
    assert balances[0] == balances[1]
    revenue = json.loads(balances[0][1])
    # posted: H1, H3, H5 and H7 whole, 300 of H2, 10 of H6, T1..T3; less the reversals of T1..T3
    # and of H2's post; H4 voided, H8 pending
    assert (revenue["posted_minor"], revenue["pending_minor"]) == (4 * 1000 + 10, 1000), revenue
