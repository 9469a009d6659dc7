"""Evidence racing an accept on one dispute, from two OS processes on PostgreSQL (SPEC §6.2,
issue 41 point 2): exactly one answer is taken, the other is 409 `dispute_not_open` with the
dispute; paycore and the processor agree on where it ended.

The main process takes DISPUTES payments through the real sandbox (its tables beside paycore's,
in the test's database), opens a chargeback on each at the sandbox and records it by its
status query's answer (`disputes.seen` -> `disputes.record`). Then one process submits evidence
to each dispute and the other accepts each, each with its own key, through
`disputes.answers.answer` (the routes' one call), released by one barrier; the accepter walks
from the middle, so both sides win some whoever starts first.
"""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.disputes import answers
from paycore.disputes import service as disputes
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.invariants import service as invariants
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore_sandbox.disputes import OpenDisputeRequest
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.integration.payments.test_capture_race_processes import _database, _destination

TENANT = "race"
DISPUTES = 12
AMOUNT_MINOR = 5000
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 180
TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=60_000)


def test_evidence_racing_accept_takes_exactly_one(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    url = settings.database_url
    destination = _destination(database)
    sandbox = Sandbox.open(url)
    try:
        processor = InProcessTransport(sandbox, timeout_ms=10_000)
        dispute_ids = [_disputed(database, sandbox, processor, destination, index) for index in range(DISPUTES)]
    finally:
        sandbox.close()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    middle = DISPUTES // 2
    accepter_order = dispute_ids[middle::-1] + dispute_ids[:middle:-1]
    processes = [
        context.Process(target=side_process, args=(url, side, order, barrier, queue))
        for side, order in (("evidence", dispute_ids), ("accept", accepter_order))
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0, 0]
    found: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {dispute_id: {} for dispute_id in dispute_ids}
    for _ in range(2 * DISPUTES):
        side, dispute_id, status, body = queue.get(timeout=5)
        found[dispute_id][side] = (status, json.loads(body))
    evidence_won = sum(_check_one(database, dispute_id, found[dispute_id]) for dispute_id in dispute_ids)
    assert 1 <= evidence_won <= DISPUTES - 1, evidence_won  # each side won some
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []
    print(f"evidence {evidence_won}, accepted {DISPUTES - evidence_won}")


def _check_one(database: Database, dispute_id: str, found: dict[str, tuple[int, dict[str, Any]]]) -> bool:
    """One answer taken (200), the other 409 `dispute_not_open` with the dispute. Returns whether
    the evidence won."""
    (evidence_status, evidence_body), (accept_status, accept_body) = found["evidence"], found["accept"]
    assert sorted((evidence_status, accept_status)) == [200, 409], (dispute_id, found)
    won = evidence_status == 200
    winner, loser = (evidence_body, accept_body) if won else (accept_body, evidence_body)
    assert loser["error"] == "dispute_not_open", loser
    assert loser["dispute"]["id"] == dispute_id
    assert winner["status"] == ("under_review" if won else "lost"), winner
    with database.read() as connection:
        held = disputes.load(connection, TENANT, dispute_id)
    assert held.status == winner["status"], (dispute_id, held.status)
    return won


def side_process(url: str, side: str, order: list[str], barrier: Any, queue: Any) -> None:
    database = _database(url)
    sandbox = Sandbox.open(url)
    processor = InProcessTransport(sandbox, timeout_ms=10_000)
    barrier.wait()
    try:
        for index, dispute_id in enumerate(order):
            path = f"/v1/disputes/{dispute_id}/{side}"
            given = answers.Answer(answers.EVIDENCE, text="losing_evidence") if side == "evidence" else None
            body = {"text": "losing_evidence"} if given is not None else {}
            scope = KeyScope(TENANT, f"{side}-{index}", fingerprint("POST", path, body), now_us(), None)
            outcome, _ = answers.answer(
                database,
                processor,
                scope,
                dispute_id,
                given or answers.Answer(answers.ACCEPT),
                actor=actors.LOCAL,
                render_refusal=render_refusal,
            )
            queue.put((side, dispute_id, outcome.status, outcome.body))
    finally:
        sandbox.close()
        database.dispose()


def _disputed(database: Database, sandbox: Sandbox, processor: InProcessTransport, destination: str, index: int) -> str:
    """A payment taken, a chargeback opened on it at the sandbox and recorded; the dispute's id."""
    body = {"index": index}
    scope = KeyScope(TENANT, f"pay-{index}", fingerprint("POST", "/v1/payments", body), now_us(), None)
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    outcome, _ = create_payment(database, processor, scope, new, timings=TIMINGS, render_refusal=render_refusal)
    paid = json.loads(outcome.body)
    assert (outcome.status, paid["status"]) == (201, "succeeded"), outcome
    opened = sandbox.open_dispute(OpenDisputeRequest(paid["processor_reference"]))
    seen = disputes.seen(opened)
    actor = actors.PROCESSOR
    database.transaction(
        lambda connection: disputes.record(connection, seen, cause="status_query", actor=actor, now_us=now_us())
    )
    with database.read() as connection:
        found = disputes.find(connection, TENANT, opened.dispute_id)
    assert found is not None and found.status == "needs_response"
    return found.id
