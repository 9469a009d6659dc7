"""A refund's thin edge from the event loop, with no worker thread (ADR 0026 decision 4), on both
databases: `refunds/create_on_loop.py`, and on PostgreSQL the loop's own connections
(`db/loop_calls.py`).

- The plain path (a new key, a well-formed body, a succeeded payment) submits nothing to a
  worker thread, the payment's first refund (its facts read) as its next ones; the reference
  path on PostgreSQL (a replay, a refusal) keeps its one worker thread, which shows the count
  can fail, and runs from the loop on SQLite.
- The write is the statements a worker thread sends (the FastAPI route's path), the same SQL in
  the same order: the payment's read and one call on PostgreSQL, the fixed list on SQLite; the
  reference path's transactions too.
- The rows and answers are the thread path's.
- A connection lost during the call on PostgreSQL is answered as the thread path answers it
  (503, the commit's outcome unknown), nothing is written twice, the key's retry gets the one
  refund, and the next refund is served on a new connection.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import refunds as money_refunds
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.refunds import create, create_on_loop
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_create_on_loop import Blocker
from tests.integration.refunds.support import paid, refund
from tests.integration.refunds.test_create_data_plane import COMMITS, STATEMENTS, threshold
from tests.support.statements import counting

# The payment made over plain HTTP (from the loop too); a refund calls no processor either way.
PLAIN_HTTP = pytest.mark.parametrize("transport", ["http"], indirect=True)
NEW_ID = re.compile(r"\b(rf|txn|ent|evt)_[0-9A-Z]{26}\b")
TIME = re.compile(r'"(created_at|updated_at|at)":\s*"[^"]*"')


def through_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the edge hands every refund to the FastAPI route: the thread path."""
    monkeypatch.setattr(money_refunds, "read_refund", lambda content_type, body: None)


@PLAIN_HTTP
def test_a_plain_refund_takes_no_worker_thread(env: Env, submitted: list[str]) -> None:
    _, payment_id = paid(env)
    _, unseen_id = paid(env)  # its facts not read yet: its first refund reads them, on the loop
    assert refund(env, payment_id, 10).status_code == 201  # the pools warm
    submitted.clear()
    for amount_minor in (20, 30, 40):
        response = refund(env, payment_id, amount_minor)
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "pending"
    assert refund(env, unseen_id, 50).status_code == 201
    assert submitted == []


@PLAIN_HTTP
def test_the_reference_path_keeps_its_worker_thread_on_postgresql(env: Env, submitted: list[str]) -> None:
    """A replay and a refusal are the reference path's: one worker thread on PostgreSQL (the
    proof the count can fail), none on SQLite (`idempotency.run_async`)."""
    _, payment_id = paid(env)
    first = refund(env, payment_id, 100, key="again")
    assert first.status_code == 201
    submitted.clear()
    replay = refund(env, payment_id, 100, key="again")
    assert (replay.status_code, replay.json()) == (201, first.json())
    assert replay.headers["Idempotent-Replayed"] == "true"
    over = refund(env, payment_id, 10_000)
    assert over.status_code == 422 and over.json()["error"] == "over_refund", over.text
    # `record`: the refusal's audit record (`http/refusals.py`), after the answer, on every path.
    assert submitted == (["run", "run", "record"] if env.database.is_postgres else ["record"])


def count_writes(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The statements of each refund's write, from the loop (`write_on_loop`) or from a worker
    thread (`_write_postgres`, `_write_sqlite`), in the order the refunds come."""
    counted: list[list[str]] = []

    def on_thread(real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = real(*args, **kwargs)
            counted.append(statements)
            return answer

        return run

    def on_loop(real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = await real(*args, **kwargs)
            counted.append(statements)
            return answer

        return run

    monkeypatch.setattr(create, "write_on_loop", on_loop(create.write_on_loop))
    monkeypatch.setattr(create, "_write_postgres", on_thread(create._write_postgres))
    monkeypatch.setattr(create, "_write_sqlite", on_thread(create._write_sqlite))
    return counted


@PLAIN_HTTP
def test_each_write_from_the_loop_sends_what_a_thread_sends(
    env: Env, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    """A payment's first refund (its facts read) and its second (cached), from the loop and from
    a worker thread (the FastAPI route): the same statements, in the same order."""
    (_, on_loop_id), (_, on_thread_id) = paid(env), paid(env)
    counted = count_writes(env, monkeypatch)
    submitted.clear()
    for amount_minor in (100, 200):
        assert refund(env, on_loop_id, amount_minor).status_code == 201
    assert submitted == []
    through_the_route(monkeypatch)
    for amount_minor in (100, 200):
        assert refund(env, on_thread_id, amount_minor).status_code == 201
    assert "_run_sync_endpoint" in submitted, "the FastAPI route: its endpoint on a worker thread"
    first_on_loop, second_on_loop, first_on_thread, second_on_thread = counted
    assert first_on_loop == first_on_thread
    assert second_on_loop == second_on_thread
    dialect = env.database.engine.dialect.name
    run = [sql for sql in second_on_loop if sql != "COMMIT"]
    assert (len(run), second_on_loop.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), second_on_loop
    assert len([sql for sql in first_on_loop if sql != "COMMIT"]) == STATEMENTS[dialect] + 1, first_on_loop
    if dialect == "postgresql":
        assert first_on_loop[0].startswith("SELECT status, capture_method, currency, destination_account_id FROM")
        assert first_on_loop[1].startswith("SELECT paycore_refunds_create(") and run[0] == first_on_loop[1]


@PLAIN_HTTP
def test_the_reference_path_from_the_loop_sends_what_a_thread_sends(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """An over-refund (the write refused, then the reference path: its refusal recorded in a
    second transaction) and its replay, the whole of `create_refund` from the loop and from a
    worker thread: the same statements, in the same order."""
    (_, on_loop_id), (_, on_thread_id) = paid(env), paid(env)
    for payment_id in (on_loop_id, on_thread_id):
        assert refund(env, payment_id, 1).status_code == 201  # its facts cached
    counted: list[list[str]] = []

    async def on_loop(*args: Any, **kwargs: Any) -> Any:
        with counting(env.database) as statements:
            answer = await real_on_loop(*args, **kwargs)
        counted.append(statements)
        return answer

    def on_thread(*args: Any, **kwargs: Any) -> Any:
        with counting(env.database) as statements:
            answer = real_on_thread(*args, **kwargs)
        counted.append(statements)
        return answer

    real_on_loop, real_on_thread = create_on_loop.create_refund, create.create_refund
    monkeypatch.setattr(create_on_loop, "create_refund", on_loop)
    monkeypatch.setattr(create, "create_refund", on_thread)
    for payment_id, key in ((on_loop_id, "over-loop"), (on_thread_id, "over-thread")):
        for _ in range(2):
            response = refund(env, payment_id, 10_000, key=key)
            assert response.status_code == 422, response.text
        if payment_id == on_loop_id:
            through_the_route(monkeypatch)
    refused_on_loop, replayed_on_loop, refused_on_thread, replayed_on_thread = counted
    assert refused_on_loop == refused_on_thread
    assert replayed_on_loop == replayed_on_thread
    # the write (no commit), the reference path's rolled back, its refusal's record committed
    assert refused_on_loop.count("COMMIT") == 1, refused_on_loop


def refunds_written(env: Env, payment_id: str) -> list[tuple[Any, ...]]:
    """The payment's refunds, their holds and events, without their ids and times."""
    with env.database.read() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT r.amount_minor, r.currency, r.status, r.reason, r.attempts, t.kind, t.reference_type,"
                    " e.type, e.from_state, e.to_state, e.cause, e.actor, e.object_sequence"
                    " FROM refunds r JOIN ledger_transfers t ON t.tenant_id = r.tenant_id AND t.id = r.transfer_id"
                    " JOIN events e ON e.tenant_id = r.tenant_id AND e.object_id = r.id"
                    " WHERE r.payment_id = :p ORDER BY r.created_at_us, e.object_sequence"
                ),
                {"p": payment_id},
            )
        ]


def answers(env: Env, payment_id: str, prefix: str) -> list[tuple[int, str | None, Any]]:
    """A sequence of refunds, good and refused, replayed and reused: each (status, the replay
    header, the body without its ids and times)."""
    found = []
    for key, amount_minor, reason in (
        ("a", 100, None),
        ("b", 250, "damaged"),
        ("a", 100, None),  # a replay
        ("a", 101, None),  # its key with another body
        ("c", 10_000, None),  # over the ceiling
        ("c", 10_000, None),  # the refusal's replay
        ("d", 650, "the rest"),
        ("e", 1, None),  # nothing left
    ):
        response = refund(env, payment_id, amount_minor, key=f"{prefix}-{key}", reason=reason)
        body = TIME.sub("", NEW_ID.sub("", response.text.replace(payment_id, "PAYMENT")))
        found.append((response.status_code, response.headers.get("Idempotent-Replayed"), body))
    return found


@PLAIN_HTTP
def test_the_rows_and_answers_are_the_thread_paths(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    (on_loop_account, on_loop_id), (on_thread_account, on_thread_id) = paid(env), paid(env)
    on_loop = answers(env, on_loop_id, "loop")
    through_the_route(monkeypatch)
    on_thread = answers(env, on_thread_id, "thread")
    assert on_loop == on_thread
    assert [status for status, _, _ in on_loop] == [201, 201, 201, 409, 422, 422, 201, 422]
    assert refunds_written(env, on_loop_id) == refunds_written(env, on_thread_id)
    assert len(refunds_written(env, on_loop_id)) == 3
    assert env.balance(on_loop_account) == {**env.balance(on_thread_account), "account_id": on_loop_account}


@PLAIN_HTTP
def test_a_refund_that_needs_approval_is_answered_as_on_the_thread(
    env: Env, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    """Within the tenant's threshold the write stores it `pending`; past it by sum the write
    refuses and the reference path stores it `requires_approval` (on PostgreSQL on one worker
    thread, on SQLite from the loop): the answers the thread path gives."""
    threshold(env.database, tenants.DEFAULT_TENANT, 150)
    (_, on_loop_id), (_, on_thread_id) = paid(env), paid(env)

    def statuses(payment_id: str) -> list[tuple[int, str]]:
        found = []
        for amount_minor in (100, 100):
            response = refund(env, payment_id, amount_minor)
            found.append((response.status_code, response.json()["status"]))
        return found

    submitted.clear()
    on_loop = statuses(on_loop_id)
    assert submitted == (["run"] if env.database.is_postgres else [])
    through_the_route(monkeypatch)
    assert on_loop == statuses(on_thread_id) == [(201, "pending"), (201, "requires_approval")]
    assert refunds_written(env, on_loop_id) == refunds_written(env, on_thread_id)


@PLAIN_HTTP
def test_a_stale_cached_clearing_account_falls_back_from_the_loop_and_is_forgotten(
    env: Env, submitted: list[str]
) -> None:
    if env.database.is_postgres:
        pytest.skip("SQLite only: PostgreSQL's call finds the clearing account by its code")
    _, payment_id = paid(env)
    assert refund(env, payment_id, 1).status_code == 201  # its facts and clearing account cached
    code, accounts = chart.processor_clearing("USD"), ledger.system_account_ids(env.database)
    assert accounts.get(tenants.DEFAULT_TENANT, code) is not None
    accounts.put(tenants.DEFAULT_TENANT, {code: "acct_x"})
    submitted.clear()
    response = refund(env, payment_id, 100)
    assert response.status_code == 201 and response.json()["status"] == "pending", response.text
    assert submitted == [], "the list refused, then the reference path, both from the loop"
    assert accounts.get(tenants.DEFAULT_TENANT, code) is None
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []


# ------------------------------------------------------------------ a connection lost mid-call
class RefundBlocker(Blocker):
    """`Blocker`, ending a refund's call (it waits on the merchant's account row the lock holds)."""

    CALLS = "paycore_refunds_create"


def refunds_of_key(env: Env, idempotency_key: str) -> list[tuple[str, int]]:
    with env.database.read() as connection:
        rows = connection.execute(
            text("SELECT status, amount_minor FROM refunds WHERE idempotency_key = :k"), {"k": idempotency_key}
        )
        return [(str(status), int(amount)) for status, amount in rows]


@PLAIN_HTTP
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_connection_lost_during_the_call_is_answered_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    merchant, payment_id = paid(env)
    assert refund(env, payment_id, 1).status_code == 201  # its facts cached: the call is the first statement
    if path == "thread":
        through_the_route(monkeypatch)
    blocker = RefundBlocker(env.database, merchant)
    blocker.hold()
    try:
        response = refund(env, payment_id, 100, key="lost")
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the refund's call was waiting on the lock, and was ended"
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"
    assert refunds_of_key(env, "lost") == [], "the call was rolled back with its backend"
    retried = refund(env, payment_id, 100, key="lost")
    assert retried.status_code == 201 and retried.json()["status"] == "pending", retried.text
    assert refunds_of_key(env, "lost") == [("pending", 100)]
    assert refund(env, payment_id, 2).status_code == 201, "the next refund on a new connection"
    assert env.client.get(f"/v1/payments/{payment_id}").json()["refundable_minor"] == 1000 - 103


# ------------------------------------------------------------------ a lock wait past its bound
WAIT_MS = 1_000  # the lock timeout of the app below (`idempotency_wait_ms`)


@PLAIN_HTTP
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_lock_wait_past_its_bound_is_answered_at_once_as_on_the_thread(
    env: Env, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call waits on the merchant's account, locked elsewhere, past the lock timeout: 503
    `database_busy` after one wait (`idempotency.waited_too_long`, no second wait by the reference
    path), from the loop and from a worker thread alike; nothing written; the keys then served."""
    merchant, payment_id = paid(env)
    bounded = replace(settings, idempotency_wait_ms=WAIT_MS)
    database = Database(bounded)
    url = settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    holding: psycopg.Connection[Any] | None = None
    try:
        with TestClient(create_app(bounded, database, env.processor)) as client:
            bounded_env = replace(env, client=client, database=database)
            holding = psycopg.connect(url)
            holding.execute("SELECT 1 FROM ledger_accounts WHERE id = %s FOR UPDATE", (merchant,))
            answered = {}
            for path in ("loop", "thread"):
                if path == "thread":
                    through_the_route(monkeypatch)
                started = time.monotonic()
                response = refund(bounded_env, payment_id, 100, key=f"busy-{path}")
                elapsed_s = time.monotonic() - started
                answered[path] = (response.status_code, response.json()["error"])
                assert WAIT_MS / 1000 <= elapsed_s < 1.8 * WAIT_MS / 1000, (path, elapsed_s)  # one wait, not two
            assert answered["loop"] == answered["thread"] == (503, "database_busy"), answered
            assert refunds_of_key(env, "busy-loop") == refunds_of_key(env, "busy-thread") == []
            holding.rollback()
            for path in ("loop", "thread"):
                assert refund(bounded_env, payment_id, 100, key=f"busy-{path}").status_code == 201
    finally:
        if holding is not None:
            holding.close()
        database.dispose()
