"""A payout's and a cancel's thin edges from the event loop, with no worker thread (ADR 0026
decision 4), on both databases: `payouts/create.py`'s `create_on_loop` and `payouts/cancel.py`'s
`cancel_on_loop`, and on PostgreSQL the loop's own connections (`db/loop_calls.py`).

- The plain path (a new key, a well-formed body, a payout the data plane writes at once; a
  cancel of a scheduled payout) submits nothing to a worker thread, the API key's owner read on
  the loop too. The thread path (the FastAPI routes) and, on PostgreSQL, the reference path (a
  key that exists) do, which shows the count can fail.
- Each phase is as many statements from the loop as on a thread: one call for a payout and
  two reads and one call for a cancel on PostgreSQL, the fixed lists on SQLite.
- A connection lost during a phase's call on PostgreSQL is answered as the thread path answers
  it (503, the commit's outcome unknown), nothing is written, and the key's retry gets the one
  result; a lock wait past its bound is answered at once (busy), as on the thread.

The rows and answers are held to the FastAPI routes' by tests/integration/http/
test_payouts_edge.py and test_payouts_edge_rows.py.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payouts as money_payouts
from paycore.kit.clock import now_us
from paycore.payouts import cancel, create
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_create_on_loop import Blocker
from tests.integration.payouts import test_cancel_data_plane as cancel_costs
from tests.integration.payouts import test_create_data_plane as create_costs
from tests.integration.payouts.support import TENANT, ach, schedule
from tests.support.payouts import funded_source
from tests.support.statements import counting

# Payouts call no processor while they are answered: one transport is enough.
IN_PROCESS = pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
FUNDED_MINOR = 100_000


def through_the_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on both edges hand every request to their FastAPI routes: the thread path."""
    monkeypatch.setattr(money_payouts, "read_payout", lambda content_type, body: None)

    async def handed_over(self: Any, scope: Any, receive: Any, send: Any) -> None:
        await self._hand_over(scope, receive, send)  # no body read, as the cancel edge reads none

    monkeypatch.setattr(money_payouts._CancelEndpoint, "__call__", handed_over)


def canceled(env: Env, payout_id: str, key: str | None = None, **headers: str) -> Any:
    key = key or f"cancel-{payout_id}"
    return env.client.post(f"/v1/payouts/{payout_id}/cancel", headers={"Idempotency-Key": key, **headers})


def warm(env: Env) -> str:
    """A funded source, and one payout made and canceled from the loop: the in-transit account
    made and known to this process, the loop's connections open."""
    source = funded_source(env.database, TENANT, FUNDED_MINOR)
    first = schedule(env, ach(source))
    assert canceled(env, first["id"]).status_code == 200
    return source


@IN_PROCESS
def test_a_payout_and_its_cancel_take_no_worker_thread(env: Env, submitted: list[str]) -> None:
    source = warm(env)
    submitted.clear()
    for amount_minor in (100, 200, 300):
        payout = schedule(env, ach(source, amount_minor))
        assert (payout["status"], payout["amount_minor"]) == ("scheduled", amount_minor)
        response = canceled(env, payout["id"])
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "canceled"
    assert submitted == []


@IN_PROCESS
def test_the_thread_path_and_the_reference_path_are_counted(
    env: Env, submitted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count can fail: what the FastAPI routes and the reference path hand to a thread."""
    source = warm(env)
    payout = schedule(env, ach(source, 700))
    assert canceled(env, payout["id"], "c-replayed").status_code == 200
    submitted.clear()
    body = ach(source, 700)
    replayed = env.client.post("/v1/payouts", json=body, headers={"Idempotency-Key": "po-replayed"})
    assert replayed.status_code == 201
    submitted.clear()
    # A key that exists: the reference path replays it, on PostgreSQL on one worker thread.
    again = env.client.post("/v1/payouts", json=body, headers={"Idempotency-Key": "po-replayed"})
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert canceled(env, payout["id"], "c-replayed").headers["idempotent-replayed"] == "true"
    assert submitted == (["run", "run"] if env.database.is_postgres else [])
    through_the_routes(monkeypatch)
    submitted.clear()
    on_thread = schedule(env, ach(source, 800))
    assert canceled(env, on_thread["id"]).status_code == 200
    # Each route: its dependency and its endpoint, each on a worker thread.
    assert submitted == ["authenticate", "_run_sync_endpoint"] * 2, submitted


@IN_PROCESS
def test_api_keys_are_read_on_the_loop(env: Env, submitted: list[str]) -> None:
    """With API keys, a payout and its cancel under a key this process never read: its owner
    read from the loop too; another tenant's key sees neither (404), no key is a 401."""
    database = env.database
    made = database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
    stranger = database.transaction(lambda connection: tenants.create_tenant(connection, "other", now_us=now_us()))
    source = funded_source(database, "acme", FUNDED_MINOR)
    own = {"Authorization": f"Bearer {made.api_key}"}
    first = env.client.post("/v1/payouts", json=ach(source), headers={"Idempotency-Key": "warm", **own})
    assert first.status_code == 201, first.text
    fresh = database.transaction(lambda connection: tenants.issue_key(connection, "acme", now_us=now_us()))
    submitted.clear()
    fresh_key = {"Authorization": f"Bearer {fresh}"}
    payout = env.client.post("/v1/payouts", json=ach(source, 300), headers={"Idempotency-Key": "p", **fresh_key})
    assert payout.status_code == 201, payout.text
    assert canceled(env, payout.json()["id"], **fresh_key).status_code == 200
    assert submitted == []
    assert canceled(env, first.json()["id"], **{"Authorization": f"Bearer {stranger.api_key}"}).status_code == 404
    assert canceled(env, first.json()["id"]).status_code == 401


Phase = Callable[..., Any]


def counted_phase(counted: list[list[str]], database: Database, real: Phase, *, on_loop: bool) -> Phase:
    """`real`, its statements counted (a coroutine function's or a sync one's, on its thread)."""
    if on_loop:

        async def run_on_loop(*args: Any, **kwargs: Any) -> Any:
            with counting(database) as statements:
                answer = await real(*args, **kwargs)
            counted.append(statements)
            return answer

        return run_on_loop

    def run(*args: Any, **kwargs: Any) -> Any:
        with counting(database) as statements:
            answer = real(*args, **kwargs)
        counted.append(statements)
        return answer

    return run


@IN_PROCESS
def test_each_phase_from_the_loop_costs_what_it_costs_on_a_thread(
    env: Env, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    source = warm(env)
    database, dialect = env.database, env.database.engine.dialect.name
    counted: dict[tuple[str, str], list[list[str]]] = {}
    phases: list[tuple[str, Any, str, Callable[..., Awaitable[Any]] | Phase, bool]] = [
        ("create", create, "create_on_loop", create.create_on_loop, True),
        ("cancel", cancel, "cancel_on_loop", cancel.cancel_on_loop, True),
        ("create", create, "create", create.create, False),
        ("cancel", cancel, "cancel", cancel.cancel, False),
    ]
    for phase, module, name, real, from_loop in phases:
        found = counted.setdefault((phase, "loop" if from_loop else "thread"), [])
        monkeypatch.setattr(module, name, counted_phase(found, database, real, on_loop=from_loop))
    submitted.clear()
    on_loop = schedule(env, ach(source, 400))
    assert canceled(env, on_loop["id"]).status_code == 200
    assert submitted == []
    through_the_routes(monkeypatch)
    on_thread = schedule(env, ach(source, 400))
    assert canceled(env, on_thread["id"]).status_code == 200
    costs = {
        "create": (create_costs.STATEMENTS[dialect], create_costs.COMMITS[dialect]),
        "cancel": (cancel_costs.STATEMENTS[dialect], cancel_costs.COMMITS[dialect]),
    }
    for phase, cost in costs.items():
        [loop], [thread] = counted[(phase, "loop")], counted[(phase, "thread")]
        for statements in (loop, thread):
            run = [sql for sql in statements if sql != "COMMIT"]
            assert (len(run), statements.count("COMMIT")) == cost, (phase, statements)
        if dialect == "sqlite":
            assert loop == thread, phase  # the same list, word for word
    if dialect == "postgresql":
        [created], [cancels] = counted[("create", "loop")], counted[("cancel", "loop")]
        assert created[0].startswith("SELECT paycore_payouts_create("), created
        # The payout's read and its events' (cut at 160 characters: their columns), then the call.
        assert cancels[0].startswith("SELECT tenant_id, id, idempotency_key, amount_minor, "), cancels
        assert cancels[1].startswith("SELECT tenant_id, id, kind, type, object_type, "), cancels
        assert cancels[2].startswith("SELECT paycore_payouts_cancel("), cancels


# ------------------------------------------------------------------ a connection lost mid-call
class PayoutCallBlocker(Blocker):
    """`Blocker` for the payouts' calls: the source account's row held, so that a payout's call
    (its hold) and a cancel's (the hold's release) wait on it, then are ended."""

    CALLS = "paycore_payouts_"


def payouts_of_key(database: Database, idempotency_key: str) -> list[tuple[str, int]]:
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT status, amount_minor FROM payouts WHERE idempotency_key = :k"), {"k": idempotency_key}
        )
        return [(str(status), int(amount)) for status, amount in rows]


def voids_of(database: Database, payout_id: str) -> int:
    with database.read() as connection:
        found = connection.execute(
            text(
                "SELECT count(*) FROM ledger_transfers WHERE kind = 'void' AND pending_id ="
                " (SELECT transfer_id FROM payouts WHERE id = :p)"
            ),
            {"p": payout_id},
        )
        return int(found.scalar_one())


def lost_during(env: Env, source: str, request: Callable[[], Any]) -> Any:
    blocker = PayoutCallBlocker(env.database, source)
    blocker.hold()
    try:
        response = request()
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the phase's call was waiting on the lock, and was ended"
    return response


def unknown_outcome(response: Any) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"


@IN_PROCESS
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_connection_lost_during_a_payouts_call_is_answered_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = warm(env)
    if path == "thread":
        through_the_routes(monkeypatch)
    body = ach(source, 1_000)

    def send() -> Any:
        return env.client.post("/v1/payouts", json=body, headers={"Idempotency-Key": "lost-payout"})

    unknown_outcome(lost_during(env, source, send))
    assert payouts_of_key(env.database, "lost-payout") == [], "the call was rolled back with its backend"
    retried = send()
    assert retried.status_code == 201 and retried.json()["status"] == "scheduled", retried.text
    assert payouts_of_key(env.database, "lost-payout") == [("scheduled", 1_000)]
    assert schedule(env, ach(source, 10))["status"] == "scheduled", "the next payout on a new connection"


@IN_PROCESS
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_connection_lost_during_a_cancels_call_is_answered_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = warm(env)
    payout_id = schedule(env, ach(source, 1_000))["id"]
    if path == "thread":
        through_the_routes(monkeypatch)
    unknown_outcome(lost_during(env, source, lambda: canceled(env, payout_id, "lost-cancel")))
    assert voids_of(env.database, payout_id) == 0, "the call was rolled back with its backend"
    retried = canceled(env, payout_id, "lost-cancel")
    assert retried.status_code == 200 and retried.json()["status"] == "canceled", retried.text
    assert voids_of(env.database, payout_id) == 1
    following = schedule(env, ach(source, 10))["id"]
    assert canceled(env, following).status_code == 200, "the next cancel on a new connection"


# ------------------------------------------------------------------ a lock held past its bound
@contextmanager
def account_held(database: Database, account_id: str) -> Iterator[None]:
    """The account's row locked from a connection of its own until the block ends."""
    url = database.settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM ledger_accounts WHERE id = %s FOR UPDATE", (account_id,))
        try:
            yield
        finally:
            holder.rollback()


LOCK_WAIT_MS = 1_000  # the database's lock_timeout here (`idempotency_wait_ms`): a short wait


@contextmanager
def waiting_briefly(env: Env) -> Iterator[Env]:
    """`env` with a database and an app whose lock waits end after LOCK_WAIT_MS."""
    settings = replace(env.settings, idempotency_wait_ms=LOCK_WAIT_MS)
    database = Database(replace(env.database.settings, idempotency_wait_ms=LOCK_WAIT_MS))
    try:
        with TestClient(create_app(settings, database, env.processor)) as client:
            yield Env(client, env.sandbox, env.processor, database, settings, env.transport)
    finally:
        database.dispose()


@IN_PROCESS
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_lock_wait_past_its_bound_is_answered_at_once_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call's lock wait past its bound (PostgreSQL's lock_timeout, `idempotency_wait_ms`)
    is answered at once (`idempotency.waited_too_long`: busy), not waited out a second time by
    the reference path; nothing is written, and the key is free for the retry."""
    with waiting_briefly(env) as brief:
        source = warm(brief)
        payout_id = schedule(brief, ach(source, 1_000))["id"]
        if path == "thread":
            through_the_routes(monkeypatch)
        body = ach(source, 500)
        requests: list[tuple[Callable[[], Any], int]] = [
            (lambda: brief.client.post("/v1/payouts", json=body, headers={"Idempotency-Key": "busy-payout"}), 201),
            (lambda: canceled(brief, payout_id, "busy-cancel"), 200),
        ]
        for send, status in requests:
            with account_held(brief.database, source):
                started_s = time.monotonic()
                response = send()
                waited_s = time.monotonic() - started_s
            assert response.status_code == 503 and response.json()["error"] == "database_busy", response.text
            assert LOCK_WAIT_MS / 1000 <= waited_s < 2 * LOCK_WAIT_MS / 1000, "one wait, not two"
            assert send().status_code == status, "nothing written: the key free for its retry"
