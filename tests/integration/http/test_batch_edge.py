"""The thin edge of `POST /v1/transfers/batch` (paycore.http.money.batches) answers exactly as the
FastAPI route it stands in front of: the same bodies and headers, good and bad, sent in the same
order to an app with the edge and to one without it (each on its own fresh database, with the
same accounts made first) get the same status, headers and JSON body (new ids and times aside).
The edge must serve the well-formed bodies itself, refusals of a transfer past its shape
included (each naming its transfer), and hand every other one to the FastAPI route."""

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
from paycore.http.money import batches as money_batches
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import repository
from paycore.ledger.batch_repository import TRANSFERS_PER_STATEMENT_MAX
from tests.support import edges
from tests.support.edges import EDGE, JSON, NO_KEY, NO_ROUTE, ROUTE
from tests.support.statements import counting

PATH = "/v1/transfers/batch"
FUTURE = "2999-01-01T00:00:00Z"
BATCH_TRANSFERS_MAX = 4  # the settings' bound, small, so that a batch past it is cheap to send
# The accounts each app's database gets first, in this order; a body names them as @A, @B, ...
ACCOUNTS = {
    "A": {"code": "cash", "currency": "USD", "normal_balance": "debit"},
    "B": {"code": "revenue", "currency": "USD", "normal_balance": "credit"},
    "C": {"code": "euro", "currency": "EUR", "normal_balance": "debit"},
    "D": {"code": "wallet", "currency": "USD", "normal_balance": "credit", "no_overdraft": True},
}
_GONE = object()


def _t(**fields: Any) -> dict[str, Any]:
    """A simple transfer (debit @A, credit @B), with fields changed, added or `_GONE`."""
    body = {"debit_account_id": "@A", "credit_account_id": "@B", "amount_minor": 500, "currency": "USD", **fields}
    return {name: value for name, value in body.items() if value is not _GONE}


def _e(account: str, direction: str, amount_minor: Any = 300, **extra: Any) -> dict[str, Any]:
    return {"account_id": account, "direction": direction, "amount_minor": amount_minor, **extra}


def _b(*transfers: Any, **fields: Any) -> bytes:
    return json.dumps({"transfers": list(transfers), **fields}).encode()


def _raw(second_amount_json: str) -> bytes:
    """A batch whose second transfer's amount is written as given."""
    first = json.dumps(_t())
    second = json.dumps(_t(amount_minor="<amount>")).replace('"<amount>"', second_amount_json)
    return f'{{"transfers":[{first},{second}]}}'.encode()


TWO = (_t(), _t(amount_minor=7, metadata={"n": "2"}))
# (what it is, body, Idempotency-Key header(s) or NO_KEY, content type, who answers): sent in order.
CASES: list[tuple[str, bytes, str | tuple[str, ...], str | None, int]] = [
    ("first batch", _b(*TWO), "k1", JSON, EDGE),
    ("its replay", _b(*TWO), "k1", JSON, EDGE),
    ("its key with another body", _b(_t()), "k1", JSON, EDGE),
    ("its key with a default written out", _b(_t(pending=False, metadata={}), TWO[1]), "k1", JSON, EDGE),
    ("no Idempotency-Key", _b(*TWO), NO_KEY, JSON, EDGE),
    ("a key too long", _b(*TWO), "k" * 256, JSON, EDGE),
    ("the key header twice", _b(_t()), ("k1", "kd"), JSON, EDGE),
    ("one transfer", _b(_t()), "k2", JSON, EDGE),
    ("at the settings' bound", _b(*[_t(amount_minor=n) for n in range(1, BATCH_TRANSFERS_MAX + 1)]), "k3", JSON, EDGE),
    ("past the settings' bound", _b(*[_t()] * (BATCH_TRANSFERS_MAX + 1)), "k4", JSON, EDGE),
    (
        "every optional field",
        _b(_t(metadata={"a": "b"}, reference_type="payment", reference_id="p1"), _t(pending=True, expires_at=FUTURE)),
        "k5",
        JSON,
        EDGE,
    ),
    ("entries and simple", _b(_t(), {"entries": [_e("@A", "debit"), _e("@D", "credit")]}), "k6", JSON, EDGE),
    ("explicit nulls", _b(_t(expires_at=None, reference_id=None, entries=None)), "k7", JSON, EDGE),
    ("an unknown account in the second", _b(_t(), _t(debit_account_id="acct_nope")), "k8", JSON, EDGE),
    ("a currency mismatch in the second", _b(_t(), _t(credit_account_id="@C")), "k9", JSON, EDGE),
    ("both shapes in the second", _b(_t(), _t(entries=[_e("@A", "debit"), _e("@B", "credit")])), "k10", JSON, EDGE),
    ("one entry in the first", _b({"entries": [_e("@A", "debit")]}, _t()), "k11", JSON, EDGE),
    ("unbalanced entries", _b({"entries": [_e("@A", "debit", 2), _e("@B", "credit", 1)]}), "k12", JSON, EDGE),
    ("an overdraft in the third", _b(_t(), _t(), _t(debit_account_id="@D", amount_minor=10**6)), "k13", JSON, EDGE),
    ("an expiry in the past", _b(_t(), _t(pending=True, expires_at="2000-01-01T00:00:00Z")), "k14", JSON, EDGE),
    ("an expiry not RFC 3339", _b(_t(pending=True, expires_at="tomorrow")), "k15", JSON, EDGE),
    ("metadata past the settings' keys", _b(_t(), _t(metadata={f"k{i}": "v" for i in range(21)})), "k16", JSON, EDGE),
    ("the largest amount", _b(_t(amount_minor=AMOUNT_MINOR_MAX)), "k17", JSON, EDGE),
    ("no amount in the second", _b(_t(), _t(amount_minor=_GONE)), "k18", JSON, EDGE),
    ("a charset parameter", _b(_t()), "k19", "application/json; charset=utf-8", EDGE),
    ("no content type", _b(_t()), "k20", None, EDGE),
    ("a bool amount in the second", _b(_t(), _t(amount_minor=True)), "k21", JSON, ROUTE),
    ("a float amount in the second", _raw("500.0"), "k22", JSON, ROUTE),
    ("an amount as text in the second", _raw('"500"'), "k23", JSON, ROUTE),
    ("a huge amount", _raw("1e400"), "k24", JSON, ROUTE),
    ("a zero amount", _b(_t(amount_minor=0)), "k25", JSON, ROUTE),
    ("a bool amount in an entry", _b({"entries": [_e("@A", "debit", True), _e("@B", "credit")]}), "k26", JSON, ROUTE),
    ("pending as text", _b(_t(pending="true")), "k27", JSON, ROUTE),
    ("an extra field in a transfer", _b(_t(), _t(note="x")), "k28", JSON, ROUTE),
    ("a NUL in metadata", _b(_t(metadata={"a": "b\x00"})), "k29", JSON, ROUTE),
    ("no transfers", _b(), "k30", JSON, ROUTE),
    ("no transfers field", b"{}", "k31", JSON, ROUTE),
    ("transfers null", b'{"transfers": null}', "k32", JSON, ROUTE),
    ("transfers an object", b'{"transfers": {"a": 1}}', "k33", JSON, ROUTE),
    ("a transfer that is a number", _b(_t(), 7), "k34", JSON, ROUTE),
    ("a transfer that is null", _b(_t(), None), "k35", JSON, ROUTE),
    ("an extra field beside transfers", _b(_t(), note="x"), "k36", JSON, ROUTE),
    ("a repeated field", b'{"transfers": [], "transfers": []}', "k37", JSON, ROUTE),
    ("a repeated field in a transfer", b'{"transfers": [{"amount_minor": 1, "amount_minor": 2}]}', "k38", JSON, ROUTE),
    ("a bad body and no key", _b(_t(amount_minor=True)), NO_KEY, JSON, ROUTE),
    ("not JSON", b"{not json", "k39", JSON, ROUTE),
    ("an empty body", b"", "k40", JSON, ROUTE),
    ("a JSON array", b"[]", "k41", JSON, ROUTE),
    ("nested deep", b'{"transfers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "k42", JSON, ROUTE),
    ("a +json type", _b(_t()), "k43", "application/vnd.paycore+json", ROUTE),
    # The route reads a +json body too: the edge's fingerprint must be the route's, both ways.
    ("the first batch's replay, +json", _b(*TWO), "k1", "application/vnd.paycore+json", ROUTE),
    ("a +json batch's replay at the edge", _b(_t(pending=False, metadata={})), "k43", JSON, EDGE),
    ("text/plain", _b(_t()), "k44", "text/plain", NO_ROUTE),
]


def _without_edge(settings: Settings, database: Database) -> FastAPI:
    return edges.without_edge(settings, database, money_batches.ROUTE)


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the edge handed to the FastAPI route."""
    return edges.count_hand_overs(monkeypatch, money_batches._BatchEndpoint)


def _accounts(client: TestClient, **headers: str) -> dict[bytes, bytes]:
    return edges.make_accounts(client, ACCOUNTS, **headers)


def test_every_batch_is_answered_as_the_fastapi_route_answers_it(
    settings: Settings, database: Database, other: tuple[Settings, Database], handed_over: list[str]
) -> None:
    other_settings, other_database = other
    settings, other_settings = (
        dataclasses.replace(s, metadata_keys_max=20, batch_transfers_max=BATCH_TRANSFERS_MAX)
        for s in (settings, other_settings)
    )
    with (
        TestClient(create_app(settings, database)) as edge,
        TestClient(_without_edge(other_settings, other_database)) as route,
    ):
        edge_accounts, route_accounts = _accounts(edge), _accounts(route)
        for name, body, key, content_type, hand_overs in CASES:
            before = len(handed_over)
            answered = edges.post(edge, edge_accounts, PATH, body, key, content_type)
            assert answered == edges.post(route, route_accounts, PATH, body, key, content_type), name
            assert len(handed_over) == before + hand_overs, name
        _, body, key, content_type, _ = CASES[0]  # the first batch, once more after all else
        replayed = edges.post(edge, edge_accounts, PATH, body, key, content_type)
        assert replayed[:2] == (201, {**replayed[1], "idempotent-replayed": "true"}), replayed
        assert edge.get(PATH).status_code == route.get(PATH).status_code == 405
        assert edge.get(PATH).headers.get("allow") == route.get(PATH).headers.get("allow")
        for account in (b"@A", b"@B", b"@D"):
            balances = [
                client.get(f"/v1/accounts/{made[account].decode()}/balance").json()
                for client, made in ((edge, edge_accounts), (route, route_accounts))
            ]
            assert balances[0] == {**balances[1], "account_id": balances[0]["account_id"]}, account


def test_a_refusal_names_its_transfer_at_the_edge(
    settings: Settings, database: Database, handed_over: list[str]
) -> None:
    with TestClient(create_app(settings, database)) as client:
        made = _accounts(client)
        body = _b(_t(), _t(), _t(debit_account_id="@D", amount_minor=10**6))
        status, _, answer = edges.post(client, made, PATH, body, "r1", JSON)
        assert not handed_over
        assert status == 422, answer
        error = json.loads(answer)
        assert (error["error"], error["param"]) == ("insufficient_funds", "transfers[2].entries"), error


# A batch over HTTP through the edge, from the accounts' facts (read once: this process has not
# seen these accounts) to its commit, per database (ADR 0026's data plane, `ledger.batch_keyed`):
# on PostgreSQL the facts and one call of `paycore_create_batch`, which claims the key, writes
# the batch and stores its answer, committed by itself (autocommit: no COMMIT of the client's);
# on SQLite the facts read outside the write, then BEGIN IMMEDIATE, the accounts' totals (one
# UPDATE per account), the key's claim with its answer, one multi-row INSERT per 500 transfers
# and per 64 entries, and the commit. The same list whatever the batch's size (two accounts
# here), but for the INSERTs' count. Before the data plane: the key's claim, the facts, the call
# and the key's answer in a transaction on PostgreSQL (4 statements and a COMMIT); on SQLite
# BEGIN IMMEDIATE, the claim, the facts, the accounts' read, the UPDATEs, the INSERTs and the
# answer.
_KEY_CLAIM, _FACTS = "INSERT INTO idempotency_keys", "SELECT tenant_id, id, code,"
_UPDATE = "UPDATE ledger_accounts SET"


def _expected(dialect: str, size: int) -> list[str]:
    if dialect == "postgresql":
        return [_FACTS, "SELECT first_sequences, refused_transfer, refused_account, refusal FROM paycore_create_batch("]
    transfers_per_insert, entries_per_insert = TRANSFERS_PER_STATEMENT_MAX, repository._ENTRIES_PER_STATEMENT_MAX
    inserts = ["INSERT INTO ledger_transfers"] * -(-size // transfers_per_insert)
    inserts += ["INSERT INTO ledger_entries"] * -(-2 * size // entries_per_insert)
    return ["BEGIN", _FACTS, "COMMIT", "BEGIN IMMEDIATE", _UPDATE, _UPDATE, _KEY_CLAIM, *inserts, "COMMIT"]


@pytest.mark.parametrize("size", [3, 800])
def test_a_batch_costs_a_fixed_list_of_statements(settings: Settings, database: Database, size: int) -> None:
    settings = dataclasses.replace(settings, batch_transfers_max=size)
    with TestClient(create_app(settings, database)) as client:
        made = _accounts(client)
        body = _b(*[_t(amount_minor=n + 1) for n in range(size)])
        with counting(database) as statements:
            status, _, answer = edges.post(client, made, PATH, body, f"s{size}", JSON)
        assert status == 201, answer
    expected = _expected(database.engine.dialect.name, size)
    facts = next(index for index, sql in enumerate(statements) if sql.startswith(_FACTS))
    written = statements[facts - expected.index(_FACTS) :]  # before the facts: the caller's auth
    assert len(written) == len(expected), written
    assert all(sql.startswith(prefix) for sql, prefix in zip(written, expected, strict=True)), written
