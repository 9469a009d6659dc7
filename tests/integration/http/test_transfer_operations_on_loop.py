"""A hold's post and void and a transfer's reversal from the event loop, with no worker thread
(ADR 0026 decision 4), on both databases: `ledger/resolve_keyed.answer_on_loop` behind the thin
edges (`http/money/transfer_operations.py`), on PostgreSQL the loop's own connections
(`db/loop_calls.py`).

- The plain path (a new key, a body the edge reads, a request the data plane takes) submits
  nothing to a worker thread; the FastAPI route's does, and so does PostgreSQL's reference path
  when the data plane declines (SQLite's runs from the loop): the count can fail.
- The same statements as the thread path (the FastAPI route's `resolve_keyed.answer`), and the
  same answers (`test_transfer_operations_edge.py` holds every body to the route's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import transfer_operations as money_operations
from paycore.ledger import resolve_keyed
from tests.integration.http.test_ledger_edges_on_loop import counted, the_edges
from tests.support import edges

JSON = edges.JSON
_SEQUENCE = re.compile(r'"account_sequence":\d+')
ACCOUNTS = {
    "A": {"code": "cash", "currency": "USD", "normal_balance": "debit"},
    "B": {"code": "revenue", "currency": "USD", "normal_balance": "credit"},
}


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as made:
        yield made


@pytest.fixture
def accounts(client: TestClient) -> dict[bytes, bytes]:
    return edges.make_accounts(client, ACCOUNTS)


def transfer(client: TestClient, accounts: dict[bytes, bytes], name: str, *, pending: bool) -> str:
    made = {
        "debit_account_id": accounts[b"@A"].decode(),
        "credit_account_id": accounts[b"@B"].decode(),
        "amount_minor": 1000,
        "currency": "USD",
        "pending": pending,
    }
    response = client.post("/v1/transfers", json=made, headers={"Idempotency-Key": f"make-{name}"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def send(client: TestClient, transfer_id: str, kind: str, key: str, body: bytes = b"") -> tuple[int, str]:
    """(status, body), the ids and times masked, and the entries' sequence numbers: the loop's
    and the thread's transfers share their accounts."""
    headers = {"Idempotency-Key": key, **({"Content-Type": JSON} if body else {})}
    response = client.post(f"/v1/transfers/{transfer_id}/{kind}", content=body, headers=headers)
    return response.status_code, _SEQUENCE.sub('"account_sequence":<n>', edges.mask(response.text))


def through_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the post's and the reversal's edges hand every body to the FastAPI route."""
    monkeypatch.setattr(money_operations, "read_post", lambda content_type, body: None)
    monkeypatch.setattr(money_operations, "read_reverse", lambda content_type, body: None)


def test_a_plain_post_void_or_reversal_takes_no_worker_thread(
    client: TestClient, accounts: dict[bytes, bytes], submitted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    holds = [transfer(client, accounts, f"h{n}", pending=True) for n in range(4)]
    plain = transfer(client, accounts, "t", pending=False)
    assert send(client, holds[0], "void", "warm")[0] == 200  # the pools warm, the accounts known
    submitted.clear()
    assert send(client, holds[1], "post", "p1")[0] == 200
    assert send(client, holds[2], "post", "p2", json.dumps({"amount_minor": 250}).encode())[0] == 200
    assert send(client, holds[2], "reverse", "r1", b"{}")[0] == 201  # a posted hold: its post reversed
    assert send(client, plain, "reverse", "r2", json.dumps({"metadata": {"why": "x"}}).encode())[0] == 201
    assert submitted == []
    through_the_route(monkeypatch)  # the count can fail: the FastAPI route's sync endpoint
    assert send(client, holds[3], "post", "route")[0] == 200
    assert submitted == ["authenticate", "_run_sync_endpoint"], submitted


def test_a_declined_request_takes_one_worker_thread_on_postgresql_only(
    client: TestClient, accounts: dict[bytes, bytes], database: Database, submitted: list[str]
) -> None:
    hold = transfer(client, accounts, "h", pending=True)
    assert send(client, hold, "post", "warm")[0] == 200
    for kind in ("post", "void"):
        submitted.clear()
        status, answer = send(client, hold, kind, f"again-{kind}")
        assert status == 409 and json.loads(answer)["error"] == "transfer_not_pending", answer
        # The data plane commits only a success: the reference path decides and records the
        # refusal, on PostgreSQL on one worker thread, on SQLite from the loop (the writer's group).
        assert the_edges(submitted) == (["run"] if database.is_postgres else [])
        submitted.clear()
        replayed = send(client, hold, kind, f"again-{kind}")
        assert replayed == (status, answer)
        assert the_edges(submitted) == (["run"] if database.is_postgres else [])


def test_each_write_from_the_loop_costs_what_it_costs_on_a_thread(
    client: TestClient,
    accounts: dict[bytes, bytes],
    database: Database,
    submitted: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holds = [transfer(client, accounts, f"h{n}", pending=True) for n in range(4)]
    found: dict[str, list[list[str]]] = {"loop": [], "thread": []}
    for way, attribute in (("loop", "answer_on_loop"), ("thread", "answer")):
        real = getattr(resolve_keyed, attribute)
        monkeypatch.setattr(resolve_keyed, attribute, counted(real, found[way], database, way == "loop"))
    answers = {}
    for way, (first, second) in (("loop", holds[:2]), ("thread", holds[2:])):
        if way == "thread":
            through_the_route(monkeypatch)
        submitted.clear()
        body = json.dumps({"amount_minor": 400}).encode()
        # The void's edge serves every void: a post of part, then one whole, on each path.
        answers[way] = [send(client, first, "post", f"{way}-1", body), send(client, second, "post", f"{way}-2")]
        assert [status for status, _ in answers[way]] == [200, 200], answers[way]
        assert (the_edges(submitted) == []) is (way == "loop"), submitted
    assert len(found["loop"]) == len(found["thread"]) == 2
    assert found["loop"] == found["thread"], found
    assert answers["loop"] == answers["thread"]
    read = "SELECT t.id, t.kind"
    for statements in found["loop"]:
        if database.is_postgres:
            assert len(statements) == 2 and statements[0].startswith(read), statements
            assert statements[1].startswith("SELECT paycore_transfer_resolve("), statements
        else:
            assert statements[1].startswith(read) and "BEGIN IMMEDIATE" in statements, statements


def test_the_answers_are_the_routes_for_a_replay_and_a_reused_key(
    client: TestClient, accounts: dict[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def requests(prefix: str) -> list[tuple[int, str]]:
        hold, plain = (
            transfer(client, accounts, f"{prefix}-h", pending=True),
            transfer(client, accounts, f"{prefix}-t", pending=False),
        )
        sent: list[Any] = [
            (hold, "post", "p", json.dumps({"amount_minor": 10}).encode()),
            (hold, "post", "p", json.dumps({"amount_minor": 10}).encode()),  # its replay
            (hold, "post", "p", b""),  # the key reused with another body: 409
            (plain, "reverse", "r", b""),
            (plain, "reverse", "r", b""),  # its replay
            (plain, "reverse", "r2", b""),  # reversed already: recorded
        ]
        return [send(client, one, kind, f"{prefix}-{key}", body) for one, kind, key, body in sent]

    on_loop = requests("loop")
    through_the_route(monkeypatch)
    assert on_loop == requests("route")
    assert [status for status, _ in on_loop] == [200, 200, 409, 201, 201, 409]
