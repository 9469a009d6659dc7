"""A payment's thin edge from the event loop, with no worker thread (ADR 0026 decision 4, issue 39
point 2), on both databases: `payments/create_on_loop.py`, and on PostgreSQL the loop's own
connections (`db/loop_calls.py`).

- The plain path (a new key, a well-formed body, the processor over plain HTTP) submits nothing
  to the worker threads' pool (`kit.threads`), an automatic payment and an authorization alike,
  the API key's owner read on the loop too; a transport that blocks (in process) keeps its
  thread, which shows the count can fail.
- Each phase is as many statements from the loop as on a thread: one call on PostgreSQL.
- The rows, totals and answers are the thread path's (the FastAPI route's, on a worker thread).
- API keys: 401s and the tenant's own key answered as on the thread path.
- A connection lost during a phase's call on PostgreSQL is answered as the thread path answers
  it (503, the commit's outcome unknown), nothing is written twice, the payment is left to the
  processor's webhook as on the thread, the key's retry gets the one result, and the next
  payment is served on a new connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.http.money import payments as money_payments
from paycore.kit.clock import now_us
from paycore.payments import accept, settle
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_accept_data_plane import COMMITS, STATEMENTS
from tests.integration.payments.test_settle_data_plane import (
    CAPTURE,
    OUTCOMES,
    SETTLE_COST,
    STATUS_CODES,
    STATUSES,
    TOKENS,
    paid,
)
from tests.support.statements import counting

PLAIN_HTTP = pytest.mark.parametrize("transport", ["http"], indirect=True)


def through_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the edge hands every payment to the FastAPI route: the thread path."""
    monkeypatch.setattr(money_payments, "read_payment", lambda content_type, body: None)


@PLAIN_HTTP
@pytest.mark.parametrize("capture", ["automatic", "manual"])
def test_a_plain_payment_takes_no_worker_thread(env: Env, submitted: list[str], capture: str) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201  # the clearing account made, the pools warm
    submitted.clear()
    for amount_minor in (100, 200, 300):
        response = env.pay(destination, amount_minor=amount_minor, capture=capture)
        assert response.status_code == 201, response.text
        assert response.json()["status"] == ("succeeded" if capture == "automatic" else "requires_capture")
    assert submitted == []


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_transport_that_blocks_keeps_its_worker_thread(env: Env, submitted: list[str]) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201
    submitted.clear()
    assert env.pay(destination).status_code == 201
    # PostgreSQL: the whole answer on one thread; SQLite: the call and the settle on one.
    assert submitted == (["_authenticated"] if env.database.is_postgres else ["call_and_settle"])


@PLAIN_HTTP
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_phase_from_the_loop_costs_what_it_costs_on_a_thread(
    env: Env, outcome: str, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201  # this process learns the accounts
    counted: dict[str, list[list[str]]] = {"accept": [], "settle": []}

    def counted_phase(phase: str, real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = await real(*args, **kwargs)
            counted[phase].append(statements)
            return answer

        return run

    monkeypatch.setattr(accept, "accept_on_loop", counted_phase("accept", accept.accept_on_loop))
    monkeypatch.setattr(settle, "settle_on_loop", counted_phase("settle", settle.settle_on_loop))
    submitted.clear()
    response = env.pay(destination, token=TOKENS[outcome], capture=CAPTURE.get(outcome))
    assert response.status_code == STATUS_CODES[outcome], response.text
    assert response.json()["status"] == STATUSES[outcome]
    assert submitted == []
    dialect = env.database.engine.dialect.name
    [accepted], [settled] = counted["accept"], counted["settle"]
    accept_cost = (STATEMENTS[dialect], COMMITS[dialect])  # the clearing account known
    for statements, cost in ((accepted, accept_cost), (settled, SETTLE_COST[(dialect, outcome)])):
        run = [sql for sql in statements if sql != "COMMIT"]
        assert (len(run), statements.count("COMMIT")) == cost, statements
    if dialect == "postgresql":
        assert accepted[0].startswith("SELECT paycore_payments_accept("), accepted
        function = "paycore_payments_authorize" if outcome == "authorized" else "paycore_payments_settle"
        assert function + "(" in settled[0], settled


@PLAIN_HTTP
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_the_rows_are_the_thread_paths(env: Env, outcome: str, monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop_destination, on_thread_destination = env.account("merchant.loop"), env.account("merchant.thread")
    env.pay(on_loop_destination)  # the clearing account exists before either payment measured
    on_loop = paid(env, on_loop_destination, outcome)
    through_the_route(monkeypatch)
    on_thread = paid(env, on_thread_destination, outcome)
    assert on_loop.response.status_code == on_thread.response.status_code == STATUS_CODES[outcome]
    assert on_loop.rows == on_thread.rows
    assert on_loop.totals == on_thread.totals


@PLAIN_HTTP
def test_api_keys_are_read_on_the_loop_and_answered_as_on_the_thread(
    env: Env, submitted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    database = env.database
    made = database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
    account = {"code": "m", "currency": "USD", "normal_balance": "credit"}
    headers = {"Authorization": f"Bearer {made.api_key}", "Idempotency-Key": "account"}
    destination = env.client.post("/v1/accounts", json=account, headers=headers).json()["id"]
    stranger = database.transaction(lambda connection: tenants.create_tenant(connection, "other", now_us=now_us()))

    def answers(path: str) -> tuple[list[tuple[int, str]], list[str]]:
        """Each request's (status, error or status), and the worker threads of the last, a
        plain payment with a key this process never read (its owner read on the loop)."""
        fresh = database.transaction(lambda connection: tenants.issue_key(connection, "acme", now_us=now_us()))
        found = []
        for name, authorization in (
            ("none", None),
            ("unknown", "Bearer nope"),
            ("basic", "Basic x"),
            ("stranger", f"Bearer {stranger.api_key}"),  # acme's account is not the other tenant's: 404
            ("own", f"Bearer {fresh}"),
        ):
            submitted.clear()
            sent = {"Idempotency-Key": f"{path}-{name}"} | ({"Authorization": authorization} if authorization else {})
            response = env.client.post("/v1/payments", json=body(destination), headers=sent)
            found.append((response.status_code, response.json().get("error") or response.json()["status"]))
        return found, list(submitted)

    on_loop, own_on_loop = answers("loop")
    assert own_on_loop == [], "the key's owner read, the accept, the call and the settle from the loop"
    through_the_route(monkeypatch)
    on_thread, own_on_thread = answers("thread")
    assert "authenticate" in own_on_thread, "the FastAPI route: its dependency and endpoint on worker threads"
    assert on_loop == on_thread
    assert on_loop == [
        (401, "unauthorized"),
        (401, "unauthorized"),
        (401, "unauthorized"),
        (404, "account_not_found"),
        (201, "succeeded"),
    ]


def body(destination: str) -> dict[str, Any]:
    return {"amount_minor": 500, "currency": "USD", "source": {"type": "card", "token": "tok_ok"},
            "destination_account": destination}  # fmt: skip


# ------------------------------------------------------------------ a connection lost mid-call
class Blocker:
    """Holds a lock on the destination's account row from a connection of its own, so that a
    phase's call waits on it, then ends that call's backend (`pg_terminate_backend`) as a
    failover or an administrator would: the call's connection is lost mid-call. On Citus the
    call's rows are a worker's: the coordinator's backend of the call is ended."""

    CALLS = "paycore_payments_"  # the prefix of the phase functions whose call is ended (others': theirs)
    TABLE = "ledger_accounts"  # the table whose row (`destination`, by its id) is held (others': theirs)

    def __init__(self, database: Database, destination: str) -> None:
        url = database.settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
        self.url, self.destination = url, destination
        self.ended: list[int] = []
        self._holder: psycopg.Connection[Any] | None = None
        self._watcher: threading.Thread | None = None

    def hold(self) -> None:
        assert self._holder is None
        holder = psycopg.connect(self.url)
        try:
            # By its tenant too: Citus locks a row of a distributed table by its distribution column.
            [(tenant_id,)] = holder.execute(f"SELECT tenant_id FROM {self.TABLE} WHERE id = %s", (self.destination,))
            holder.execute(
                f"SELECT 1 FROM {self.TABLE} WHERE tenant_id = %s AND id = %s FOR UPDATE",
                (tenant_id, self.destination),
            )
        except BaseException:
            holder.close()
            raise
        self._holder = holder
        self._watcher = threading.Thread(target=self._end_the_call, daemon=True)
        self._watcher.start()

    def _end_the_call(self) -> None:
        """Ends the backend running a phase's call (`CALLS`, `paycore_payments_*`), which the lock holds."""
        with psycopg.connect(self.url, autocommit=True) as admin:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not self.ended:
                row = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'paycore' AND state = 'active'"
                    " AND query LIKE %s AND pid <> pg_backend_pid()",
                    (f"SELECT %{self.CALLS}%",),
                ).fetchone()
                if row is not None:
                    time.sleep(0.05)  # well inside the call, waiting on the lock
                    admin.execute("SELECT pg_terminate_backend(%s::integer)", (row[0],))
                    self.ended.append(int(row[0]))
                time.sleep(0.01)

    def release(self) -> None:
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        if self._holder is not None:
            self._holder.rollback()
            self._holder.close()
        self._holder, self._watcher = None, None


def payments_of_key(database: Database, idempotency_key: str) -> list[tuple[str, int]]:
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT status, amount_minor FROM payments WHERE idempotency_key = :k"), {"k": idempotency_key}
        )
        return [(str(status), int(amount)) for status, amount in rows]


def lost_during_accept(env: Env, destination: str, idempotency_key: str) -> Any:
    blocker = Blocker(env.database, destination)
    blocker.hold()
    try:
        response = env.pay(destination, key=idempotency_key)
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the accept's call was waiting on the lock, and was ended"
    return response


def lost_during_settle(env: Env, destination: str, idempotency_key: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The lock taken once the processor has answered: the settle's call waits on it."""
    blocker = Blocker(env.database, destination)
    processor: Any = env.processor
    real_charge, real_charge_on_loop = processor.charge, processor.charge_on_loop

    def charge(request: Any) -> Any:
        answer = real_charge(request)
        blocker.hold()
        return answer

    async def charge_on_loop(request: Any) -> Any:
        answer = await real_charge_on_loop(request)
        blocker.hold()
        return answer

    with monkeypatch.context() as patched:
        patched.setattr(processor, "charge", charge)
        patched.setattr(processor, "charge_on_loop", charge_on_loop)
        try:
            response = env.pay(destination, key=idempotency_key)
        finally:
            blocker.release()
    assert len(blocker.ended) == 1, "the settle's call was waiting on the lock, and was ended"
    return response


@PLAIN_HTTP
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_connection_lost_during_the_accept_is_answered_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201
    if path == "thread":
        through_the_route(monkeypatch)
    response = lost_during_accept(env, destination, "lost-accept")
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"
    assert payments_of_key(env.database, "lost-accept") == [], "the call was rolled back with its backend"
    retried = env.pay(destination, key="lost-accept")
    assert retried.status_code == 201 and retried.json()["status"] == "succeeded", retried.text
    assert payments_of_key(env.database, "lost-accept") == [("succeeded", 1000)]
    assert env.pay(destination).status_code == 201, "the next payment on a new connection"


@PLAIN_HTTP
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["loop", "thread"])
def test_a_connection_lost_during_the_settle_is_answered_as_on_the_thread(
    env: Env, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201
    if path == "thread":
        through_the_route(monkeypatch)
    response = lost_during_settle(env, destination, "lost-settle", monkeypatch)
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"
    # Accepted, charged, its settle rolled back with its backend: `processing`, never guessed.
    assert payments_of_key(env.database, "lost-settle") == [("processing", 1000)]
    assert env.deliver() >= 1  # the processor's webhook settles it, as after a lost answer
    assert payments_of_key(env.database, "lost-settle") == [("succeeded", 1000)]
    retried = env.pay(destination, key="lost-settle")
    assert retried.status_code == 201 and retried.json()["status"] == "succeeded", retried.text
    assert env.balance(destination)["posted_minor"] == 2000
    assert env.pay(destination).status_code == 201, "the next payment on a new connection"
