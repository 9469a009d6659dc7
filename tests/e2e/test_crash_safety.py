"""kill -9 safety (SPEC §3.1, §4): a server killed mid-way through a stream of credits, then
restarted, with every request retried under its own key: each credit lands exactly once, and
the ledger verifies. A transaction cut off by the kill either committed whole (its retry
replays it) or left nothing behind (its retry executes it)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.client import HTTPException

import pytest
from sqlalchemy import select

from paycore.credits.models import credits
from paycore.db.engine import Database
from tests.e2e.support import Reply, StartServers, assert_ledger_verifies, call, credit_balance, credit_body, start_all

TENANT = "crash"
PATH = f"/v1/tenants/{TENANT}/credits"
COUNT = 60
THREADS = 8
KILL_AFTER = COUNT // 3
RETRY_DEADLINE_S = 45
TRANSIENT = {(409, "idempotency_request_in_progress"), (503, "database_busy")}


def amount_of(index: int) -> int:
    return 100 + index  # distinct integers, so a lost or doubled credit shows in the amounts


class CreditStream:
    """COUNT credits sent from THREADS threads until stopped. Per index, `outcomes` holds the
    Reply, 'refused' (the connection never opened: nothing reached the server), 'lost' (the
    connection died with the request in flight: outcome unknown), or None (never sent).
    A kill between a response's headers and its body raises IncompleteRead, an HTTPException
    and not an OSError: that request is 'lost' too (its credit may well have committed)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.outcomes: list[Reply | str | None] = [None] * COUNT
        self.stopped = threading.Event()
        self.answered_enough = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._answered = 0
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(THREADS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self._threads), f"request threads alive after {timeout_s} s"

    def _work(self) -> None:
        while not self.stopped.is_set():
            with self._lock:
                index = self._next
                if index >= COUNT:
                    return
                self._next += 1
            try:
                reply = call(self.port, "POST", PATH, credit_body(f"crash-{index}", amount_of(index)), timeout_s=10)
            except ConnectionRefusedError:
                self.outcomes[index] = "refused"
                continue
            except (OSError, HTTPException):  # reset, timed out, or cut off mid-response
                self.outcomes[index] = "lost"
                continue
            self.outcomes[index] = reply
            with self._lock:
                self._answered += 1
                if self._answered >= KILL_AFTER:
                    self.answered_enough.set()


def retry_until_settled(port: int, index: int) -> Reply:
    """Retry one credit with its key; a request cut off by the kill may still hold its key for
    a moment (PostgreSQL aborts the orphaned transaction), so transient answers are retried."""
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        reply = call(port, "POST", PATH, credit_body(f"crash-{index}", amount_of(index)))
        if (reply.status, reply.error) not in TRANSIENT or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)


def kind(outcome: Reply | str | None) -> str:
    if isinstance(outcome, Reply):
        return str(outcome.status)
    return outcome or "unsent"


@pytest.mark.slow
def test_kill_9_mid_way_then_retrying_every_key_credits_each_exactly_once(
    database_url: str, database: Database, serve_processes: StartServers
) -> None:
    [server] = serve_processes(1, database_url)
    stream = CreditStream(server.port)
    stream.start()
    assert stream.answered_enough.wait(30), f"fewer than {KILL_AFTER} answers in 30 s:\n{server.log()}"
    stream.stopped.set()  # no new requests; those in flight now are cut off by the kill
    server.kill9()  # SIGKILL: no shutdown, no rollback by the process, its connections just die
    stream.join(30)

    before = Counter(kind(outcome) for outcome in stream.outcomes)
    print(f"before the kill: {dict(before)}")
    assert set(before) <= {"201", "lost", "refused", "unsent"}, before
    assert before["201"] >= KILL_AFTER and before["unsent"] > 0, before

    start_all([server])  # the same command again, on the same database
    results = [retry_until_settled(server.port, index) for index in range(COUNT)]
    after = Counter(f"{kind(outcome)}->{reply.status}" for outcome, reply in zip(stream.outcomes, results, strict=True))
    print(f"retries: {dict(after)}")
    for index, (outcome, reply) in enumerate(zip(stream.outcomes, results, strict=True)):
        assert reply.status in (200, 201), (index, reply)
        assert reply.body["amount_minor"] == amount_of(index), (index, reply)
        if isinstance(outcome, Reply):  # created before the kill: the retry replays it
            assert reply.status == 200 and reply.body == outcome.body, (index, outcome, reply)
        elif outcome != "lost":  # nothing reached the server: the retry creates it
            assert reply.status == 201, (index, outcome, reply)

    assert credit_balance(server.port, TENANT) == sum(amount_of(index) for index in range(COUNT))
    with database.read() as connection:
        query = select(credits.c.amount_minor).where(credits.c.tenant_id == TENANT)
        stored = sorted(connection.execute(query).scalars())
    assert stored == [amount_of(index) for index in range(COUNT)], "each credit must be stored exactly once"
    assert_ledger_verifies(database_url)
