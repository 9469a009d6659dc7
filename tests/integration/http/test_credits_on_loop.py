"""A credit's thin edge from the event loop, with no worker thread (ADR 0026 decision 4), on both
databases: on PostgreSQL the caller's key read (`authenticate_on_loop`) and the one call
(`credits/create.py`) awaited on the loop's own connections (`db/loop_calls.py`); on SQLite the
list handed to the writer, as before.

- The plain path (a new key, a well-formed body) submits nothing to a worker thread, in local
  mode and with an API key this process has not read; the reference path on PostgreSQL (a
  replay) keeps its worker thread, which shows the count can fail.
- The write is as many statements as on a worker thread (`test_credits_data_plane.py`'s
  counts): the one call on PostgreSQL, the fixed list on SQLite; the edge's and the FastAPI
  route's the same.
- A connection lost during the call on PostgreSQL is answered as a worker thread's
  `Database.autocommit()` answered it (503, the commit's outcome unknown), nothing is written
  twice, the key's retry gets the one credit, and the next credit is served on a new connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.credits import create
from paycore.db.engine import Database
from paycore.http.money import credits as money_credits
from paycore.kit.clock import now_us
from paycore.tenants import service as tenants
from tests.integration.http.test_credits_data_plane import COMMITS, STATEMENTS
from tests.integration.payments.test_create_on_loop import Blocker
from tests.support.statements import counting

PATH = "/v1/tenants/acme/credits"


def credit(client: TestClient, key: str, amount_minor: int = 199, **headers: str) -> Any:
    lines = [{"desc": "bonus", "amount_minor": amount_minor, "currency": "USD"}]
    return client.post(PATH, json={"idempotency_key": key, "lines": lines}, headers=headers)


def through_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the edge hands every credit to the FastAPI route."""
    monkeypatch.setattr(money_credits, "read_credit", lambda content_type, body: None)


def test_a_plain_credit_takes_no_worker_thread(client: TestClient, database: Database, submitted: list[str]) -> None:
    assert credit(client, "warm").status_code == 201  # the accounts made, the pools warm
    submitted.clear()
    for index in range(3):
        response = credit(client, f"k{index}", 100 + index)
        assert response.status_code == 201, response.text
    assert submitted == []
    replay = credit(client, "k0", 100)
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    # The replay is the reference path's: on PostgreSQL its transaction on a worker thread
    # (`Database.transaction_async`), the proof the count can fail; on SQLite the writer's.
    assert submitted == (["transaction"] if database.is_postgres else [])


def test_an_api_key_is_read_on_the_loop(client: TestClient, database: Database, submitted: list[str]) -> None:
    made = database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
    assert credit(client, "warm", Authorization=f"Bearer {made.api_key}").status_code == 201
    fresh = database.transaction(lambda connection: tenants.issue_key(connection, "acme", now_us=now_us()))
    submitted.clear()
    assert credit(client, "fresh", Authorization=f"Bearer {fresh}").status_code == 201  # its owner read
    assert credit(client, "none").status_code == 401
    assert submitted == []


def test_the_write_costs_what_it_cost_on_a_thread(
    client: TestClient, database: Database, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    """The credit's phase alone (`create.create_credit`), through the edge and through the
    FastAPI route: the same statements, as many as `test_credits_data_plane.py` counts."""
    assert credit(client, "warm").status_code == 201  # this process learns the accounts
    counted: list[list[str]] = []
    real = create.create_credit

    async def counted_phase(*args: Any, **kwargs: Any) -> Any:
        with counting(database) as statements:
            answer = await real(*args, **kwargs)
        counted.append(statements)
        return answer

    phase: Callable[..., Awaitable[Any]] = counted_phase
    monkeypatch.setattr(create, "create_credit", phase)
    submitted.clear()
    assert credit(client, "edge").status_code == 201
    assert submitted == []
    through_the_route(monkeypatch)
    assert credit(client, "route").status_code == 201
    on_edge, on_route = counted
    assert on_edge == on_route
    dialect = database.engine.dialect.name
    run = [sql for sql in on_edge if sql != "COMMIT"]
    assert (len(run), on_edge.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), on_edge
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_credits_create("), run


# ------------------------------------------------------------------ a connection lost mid-call
class CreditBlocker(Blocker):
    """`Blocker`, ending a credit's call (it waits on the tenant's account row the lock holds)."""

    CALLS = "paycore_credits_create"


def credits_of_key(database: Database, idempotency_key: str) -> list[int]:
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT amount_minor FROM credits WHERE tenant_id = 'acme' AND idempotency_key = :k"),
            {"k": idempotency_key},
        )
        return [int(amount) for (amount,) in rows]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_connection_lost_during_the_call_is_answered_as_on_a_thread(client: TestClient, database: Database) -> None:
    assert credit(client, "warm").status_code == 201
    with database.read() as connection:
        account_ids = [
            row[0] for row in connection.execute(text("SELECT id FROM ledger_accounts WHERE tenant_id = 'acme'"))
        ]
    assert len(account_ids) == 2, account_ids
    blocker = CreditBlocker(database, account_ids[0])
    blocker.hold()
    try:
        response = credit(client, "lost", 300)
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the credit's call was waiting on the lock, and was ended"
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"
    assert credits_of_key(database, "lost") == [], "the call was rolled back with its backend"
    retried = credit(client, "lost", 300)
    assert retried.status_code == 201, retried.text
    assert credits_of_key(database, "lost") == [300]
    assert credit(client, "next").status_code == 201, "the next credit on a new connection"
    assert client.get("/v1/tenants/acme/balance").json() == {"currency": "USD", "amount_minor": 199 + 300 + 199}
