"""An authorization's capture and cancel from the event loop, with no worker thread (ADR 0026
decision 4, ADR 0029), on both databases: `payments/operations_on_loop.py`, and on PostgreSQL
the loop's own connections (`db/loop_calls.py`).

- The plain path (a new key, a well-formed body, the processor over plain HTTP) submits nothing
  to a worker thread, a capture and a cancel alike; a transport that blocks (in process) keeps
  its thread, which shows the count can fail.
- Each phase (begin, finish) sends the statements from the loop that it sends on a thread.
- The rows, totals and answers are the thread path's (`routers.payments.capture_answer` and
  `cancel_answer` on a worker thread, as the FastAPI routes run them).
- An answer the data plane leaves (no answer from the processor: in doubt) is the reference
  path's, as on the thread: from the loop on SQLite, on one worker thread on PostgreSQL.
- A connection lost during a phase's call on PostgreSQL is answered as the thread path answers
  it (503, the commit's outcome unknown), nothing is done twice, and the key's retry gets the
  one result; a lock wait past its bound is answered at once, as on the thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from paycore.http.money import payment_operations as money_operations
from paycore.payments import capture, capture_repository
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_capture_data_plane import (
    DONE,
    OPERATIONS,
    authorized,
    captured,
    post_operation,
)
from tests.integration.payments.test_create_on_loop import Blocker
from tests.support.statements import counting

PLAIN_HTTP = pytest.mark.parametrize("transport", ["http"], indirect=True)


def on_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the edge answers every capture and cancel on one worker thread, as it did
    before (and as the FastAPI routes do): the thread path, with the same transport."""
    monkeypatch.setattr(money_operations, "loop_caller", lambda processor: None)


@PLAIN_HTTP
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_plain_capture_or_cancel_takes_no_worker_thread(env: Env, submitted: list[str], operation: str) -> None:
    destination = env.account()
    warm_up = authorized(env, destination)
    payment_ids = [authorized(env, destination, amount_minor=amount) for amount in (4000, 5000, 6000)]
    response = post_operation(env, operation, warm_up, "warm-up")  # the pools and connections warm
    assert response.status_code == 200, response.text
    submitted.clear()
    for index, payment_id in enumerate(payment_ids):
        response = post_operation(env, operation, payment_id, f"op-{index}")
        assert response.status_code == 200 and response.json()["status"] == DONE[operation], response.text
    assert submitted == []


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_transport_that_blocks_keeps_its_worker_thread(env: Env, submitted: list[str], operation: str) -> None:
    destination = env.account()
    warm_up, payment_id = authorized(env, destination), authorized(env, destination)
    assert post_operation(env, operation, warm_up, "warm-up").status_code == 200
    submitted.clear()
    assert post_operation(env, operation, payment_id, "op").status_code == 200
    # PostgreSQL: the key's owner read on the thread too; SQLite: read on the loop.
    answer = "capture_answer" if operation == "capture" else "cancel_answer"
    assert submitted == (["_authenticated"] if env.database.is_postgres else [answer])


def counted_phases(env: Env, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Each phase's statements, from the loop (`begin_on_loop`, `finish_on_loop`) and on a
    thread (`begin`, `finish`), by the name of the phase's function."""
    counted: dict[str, list[list[str]]] = {}

    def on_thread(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = real(*args, **kwargs)
            assert answer is not None, f"{name} wrote the phase"
            counted.setdefault(name, []).append(statements)
            return answer

        return run

    def on_loop(name: str, real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = await real(*args, **kwargs)
            assert answer is not None, f"{name} wrote the phase"
            counted.setdefault(name, []).append(statements)
            return answer

        return run

    for name in ("begin", "finish"):
        monkeypatch.setattr(capture, name, on_thread(name, getattr(capture, name)))
        monkeypatch.setattr(capture, f"{name}_on_loop", on_loop(f"{name}_on_loop", getattr(capture, f"{name}_on_loop")))
    return counted


@PLAIN_HTTP
@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_phase_from_the_loop_sends_what_it_sends_on_a_thread(
    env: Env, operation: str, monkeypatch: pytest.MonkeyPatch, submitted: list[str]
) -> None:
    destination = env.account()
    on_loop_id, on_thread_id = authorized(env, destination), authorized(env, destination)
    counted = counted_phases(env, monkeypatch)
    submitted.clear()
    assert post_operation(env, operation, on_loop_id, "loop").status_code == 200
    assert submitted == []
    with monkeypatch.context() as patched:
        on_a_thread(patched)
        assert post_operation(env, operation, on_thread_id, "thread").status_code == 200
    assert sorted(counted) == ["begin", "begin_on_loop", "finish", "finish_on_loop"], counted
    postgres = env.database.is_postgres
    for phase in ("begin", "finish"):
        [loop], [thread] = counted[f"{phase}_on_loop"], counted[phase]
        loop_run, thread_run = [s for s in loop if s != "COMMIT"], [s for s in thread if s != "COMMIT"]
        assert len(loop_run) == len(thread_run), (phase, loop, thread)
        if postgres and phase == "begin":
            # The authorization's read, then the call: the read, on the loop's connection in
            # autocommit, commits nothing (the thread's read-only transaction commits).
            assert loop_run[0] == " ".join(capture_repository.LOAD_PAYMENT.postgresql.split())[:160], loop
            assert thread_run[0].startswith("SELECT payments.tenant_id, payments.id, "), thread
            assert loop_run[1:] == thread_run[1:], (loop, thread)
            assert thread.count("COMMIT") == 1 and loop.count("COMMIT") == 0, (loop, thread)
        else:
            assert loop == thread, (phase, loop, thread)
    if postgres:
        assert counted["begin_on_loop"][0][-1].startswith(f"SELECT paycore_payments_{operation}_begin(")
        assert counted["finish_on_loop"][0][0].startswith(f"SELECT * FROM paycore_payments_{operation}_finish(")


@PLAIN_HTTP
@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_rows_and_answers_are_the_thread_paths(env: Env, operation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop_destination, on_thread_destination = env.account("merchant.loop"), env.account("merchant.thread")
    env.pay(on_loop_destination)  # the clearing account exists before either flow measured
    on_loop = captured(env, on_loop_destination, "op-loop", operation)
    on_a_thread(monkeypatch)
    on_thread = captured(env, on_thread_destination, "op-thread", operation)
    loop_response, loop_rows, loop_totals = on_loop
    thread_response, thread_rows, thread_totals = on_thread
    assert loop_response.status_code == thread_response.status_code == 200
    assert {k: v for k, v in loop_response.headers.items() if k not in ("date", "x-request-id")} == {
        k: v for k, v in thread_response.headers.items() if k not in ("date", "x-request-id")
    }
    assert loop_rows == thread_rows
    assert loop_totals == thread_totals
    assert loop_totals["destination"]["credits_posted_minor"] == (3000 if operation == "capture" else 0)


@PLAIN_HTTP
@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_answer_from_the_processor_is_the_reference_paths_as_on_the_thread(
    env: Env, operation: str, submitted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost answer: finish's data plane writes nothing and the reference path records the
    call, in doubt (202), never failed; from the loop on SQLite, on one thread on PostgreSQL."""
    destination = env.account()
    on_loop_id, on_thread_id = authorized(env, destination), authorized(env, destination)
    answers = []
    for payment_id, path in ((on_loop_id, "loop"), (on_thread_id, "thread")):
        if path == "thread":
            on_a_thread(monkeypatch)
        env.faults({"fault": "drop_response", "next_n": 1, "ops": [operation]})
        submitted.clear()
        response = post_operation(env, operation, payment_id, path)
        assert response.status_code == 202, response.text
        body = response.json()
        answers.append((body["status"], body["in_doubt_operation"]))
        if path == "loop":
            assert submitted == (["transaction"] if env.database.is_postgres else [])
    assert answers == [("in_doubt", operation)] * 2
    env.deliver()  # the processor did it: its webhooks settle both
    for payment_id in (on_loop_id, on_thread_id):
        assert env.client.get(f"/v1/payments/{payment_id}").json()["status"] == DONE[operation]


# ------------------------------------------------------------------ a connection lost mid-call
class PaymentBlocker(Blocker):
    """`Blocker` holding the payment's row instead: begin's call waits on it, and is ended."""

    TABLE = "payments"

    def __init__(self, env: Env, payment_id: str) -> None:
        super().__init__(env.database, payment_id)


def payment_of(env: Env, payment_id: str) -> tuple[str, str | None]:
    with env.database.read() as connection:
        row = connection.execute(text("SELECT status, operation FROM payments WHERE id = :p"), {"p": payment_id}).one()
    return str(row[0]), row[1]


def lost(response: Any) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable" and response.json()["commit_outcome"] == "unknown"


@PLAIN_HTTP
@pytest.mark.parametrize("path", ["loop", "thread"])
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_connection_lost_during_begin_is_answered_as_on_the_thread(
    env: Env, path: str, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = env.account()
    warm_up, payment_id = authorized(env, destination), authorized(env, destination)
    assert post_operation(env, operation, warm_up, "warm-up").status_code == 200
    if path == "thread":
        on_a_thread(monkeypatch)
    blocker = PaymentBlocker(env, payment_id)
    blocker.hold()
    try:
        response = post_operation(env, operation, payment_id, "lost-begin")
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "begin's call was waiting on the lock, and was ended"
    lost(response)
    assert payment_of(env, payment_id) == ("requires_capture", None), "the call rolled back with its backend"
    retried = post_operation(env, operation, payment_id, "lost-begin")
    assert retried.status_code == 200 and retried.json()["status"] == DONE[operation], retried.text
    assert post_operation(env, operation, authorized(env, destination), "next").status_code == 200, "a new connection"


@PLAIN_HTTP
@pytest.mark.parametrize("path", ["loop", "thread"])
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_connection_lost_during_finish_is_answered_as_on_the_thread(
    env: Env, path: str, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock taken once the processor has answered: finish's call waits on it."""
    destination = env.account()
    warm_up, payment_id = authorized(env, destination), authorized(env, destination)
    assert post_operation(env, operation, warm_up, "warm-up").status_code == 200
    if path == "thread":
        on_a_thread(monkeypatch)
    blocker = Blocker(env.database, destination)
    processor: Any = env.processor
    real, real_on_loop = getattr(processor, operation), getattr(processor, f"{operation}_on_loop")

    def call(request: Any) -> Any:
        answer = real(request)
        blocker.hold()
        return answer

    async def call_on_loop(request: Any) -> Any:
        answer = await real_on_loop(request)
        blocker.hold()
        return answer

    with monkeypatch.context() as patched:
        patched.setattr(processor, operation, call)
        patched.setattr(processor, f"{operation}_on_loop", call_on_loop)
        try:
            response = post_operation(env, operation, payment_id, "lost-finish")
        finally:
            blocker.release()
    assert len(blocker.ended) == 1, "finish's call was waiting on the lock, and was ended"
    lost(response)
    # Sent, answered, its finish rolled back with its backend: `processing`, never guessed.
    assert payment_of(env, payment_id) == ("processing", operation)
    assert env.deliver() >= 1  # the processor's webhook settles it, as after a lost answer
    assert payment_of(env, payment_id)[0] == DONE[operation]
    retried = post_operation(env, operation, payment_id, "lost-finish")
    assert retried.status_code == 200 and retried.json()["status"] == DONE[operation], retried.text
    posted = (3000 if operation == "capture" else 0) * 2
    assert env.balance(destination)["posted_minor"] == posted
    assert post_operation(env, operation, authorized(env, destination), "next").status_code == 200, "a new connection"


@PLAIN_HTTP
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_lock_wait_past_its_bound_is_answered_at_once_as_on_the_thread(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """begin's call waits on the payment's row past `lock_timeout` (the key's wait): answered as
    the thread path answers it (`idempotency.waited_too_long`), nothing written, no second wait.
    A capture's only: a cancel's begin reads its call's errors by the same rule."""
    operation = "capture"
    destination = env.account()
    on_loop_id, on_thread_id = authorized(env, destination), authorized(env, destination)
    url = env.database.settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    wait_s = env.database.settings.idempotency_wait_ms / 1000  # the connections' lock_timeout
    answers = []
    for payment_id, path in ((on_loop_id, "loop"), (on_thread_id, "thread")):
        if path == "thread":
            on_a_thread(monkeypatch)
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM payments WHERE id = %s FOR UPDATE", (payment_id,))
            started_s = time.monotonic()
            response = post_operation(env, operation, payment_id, f"locked-{path}")
            waited_s = time.monotonic() - started_s
            holder.rollback()
        assert waited_s < 1.5 * wait_s, f"one wait of the lock's bound ({wait_s} s), not two: {waited_s} s"
        answers.append((response.status_code, response.json()["error"]))
        assert payment_of(env, payment_id) == ("requires_capture", None), "nothing written"
        retried = post_operation(env, operation, payment_id, f"locked-{path}")
        assert retried.status_code == 200 and retried.json()["status"] == DONE[operation], retried.text
    assert answers[0] == answers[1] and answers[0][0] == 503, answers
