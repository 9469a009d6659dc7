"""The worker's round over dispute answers whose reply was lost, on two OS processes at once on
PostgreSQL (issue 41 point 2): each kept answer is claimed by exactly one of them (a lease taken
with FOR UPDATE SKIP LOCKED), asked about once, and settled once.

The main process takes DISPUTES payments through the real sandbox (its tables beside paycore's,
in the test's database), opens and records a chargeback on each, then submits evidence to each
with the processor's reply dropped (202: each dispute kept in flight). Two processes, released
by one barrier, each run one `resolve_dispute_answers` round big enough to take them all.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.disputes import answers, in_flight
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.invariants import service as invariants
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.integration.disputes.test_answer_race_processes import TENANT, _disputed
from tests.integration.payments.test_capture_race_processes import _database, _destination

DISPUTES = 12
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 180
POLICY = Policy(attempts_max=3, backoff_ms=60_000, backoff_max_ms=60_000, lease_ms=300_000, batch_max=DISPUTES)
ACTOR = actors.worker(in_flight.JOB)


def test_two_workers_claim_each_kept_answer_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite has one writer: two rounds cannot claim at once; the claim is PostgreSQL's")
    url = settings.database_url
    destination = _destination(database)
    sandbox = Sandbox.open(url)
    try:
        processor = InProcessTransport(sandbox, timeout_ms=10_000)
        dispute_ids = [_disputed(database, sandbox, processor, destination, index) for index in range(DISPUTES)]
        dropped = {"fault": "drop_response", "next_n": DISPUTES, "ops": ["dispute_evidence"]}
        sandbox.set_fault_plan({"seed": 1, "hold_ms": 0, "settle_late_ms": 0, "rules": [dropped]})
        for dispute_id in dispute_ids:
            assert _lost_evidence(database, processor, dispute_id) == 202
        sandbox.set_fault_plan({"seed": 1, "hold_ms": 0, "settle_late_ms": 0, "rules": []})
    finally:
        sandbox.close()
    assert _kept(database) == DISPUTES
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    processes = [context.Process(target=worker_process, args=(url, name, barrier, queue)) for name in ("a", "b")]
    for process in processes:
        process.start()
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0, 0]
    rounds = dict(queue.get(timeout=5) for _ in processes)

    assert sum(claimed for claimed, _ in rounds.values()) == DISPUTES, rounds  # no answer claimed twice
    assert sum(settled for _, settled in rounds.values()) == DISPUTES, rounds
    assert _kept(database) == 0
    with database.engine.connect() as connection:
        asked = connection.execute(
            text(
                "SELECT object_id, COUNT(*) FROM events WHERE tenant_id = :t AND type = 'processor.get_dispute' "
                "AND actor = :a GROUP BY object_id"
            ),
            {"t": TENANT, "a": ACTOR},
        ).all()
        statuses = connection.execute(text("SELECT status FROM disputes WHERE tenant_id = :t"), {"t": TENANT}).all()
    assert sorted(asked) == sorted((dispute_id, 1) for dispute_id in dispute_ids)  # each asked once
    assert {status for (status,) in statuses} <= {"under_review", "lost"}  # losing_evidence: decided or not yet
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []
    print(f"rounds {rounds}")


def _lost_evidence(database: Database, processor: InProcessTransport, dispute_id: str) -> int:
    path = f"/v1/disputes/{dispute_id}/evidence"
    body = {"text": "losing_evidence"}
    scope = KeyScope(TENANT, f"ev-{dispute_id}", fingerprint("POST", path, body), now_us(), None)
    outcome, _ = answers.answer(
        database,
        processor,
        scope,
        dispute_id,
        answers.Answer(answers.EVIDENCE, text="losing_evidence"),
        actor=actors.LOCAL,
        render_refusal=render_refusal,
    )
    return outcome.status


def _kept(database: Database) -> int:
    with database.engine.connect() as connection:
        return int(connection.execute(text("SELECT COUNT(*) FROM dispute_answers_in_flight")).scalar_one())


def worker_process(url: str, name: str, barrier: Any, queue: Any) -> None:
    database = _database(url)
    sandbox = Sandbox.open(url)
    processor = InProcessTransport(sandbox, timeout_ms=10_000)
    barrier.wait()
    try:
        done = in_flight.resolve_due(database, processor, POLICY, f"worker-{name}", actor=ACTOR)
        queue.put((name, (done.claimed, done.settled)))
    finally:
        sandbox.close()
        database.dispose()
