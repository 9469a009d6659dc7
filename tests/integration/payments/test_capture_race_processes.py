"""Capture racing cancel (and two captures under two keys) on one authorization, from two OS
processes on PostgreSQL (SPEC §6.1, issue 40 point 5): exactly one wins, the money moves once,
the loser gets 409 with the payment.

The main process authorizes PAYMENTS payments through the real sandbox (its tables beside
paycore's, in the test's database). Then one process captures each payment (part of it) and
the other cancels each, every one with its own key, through `payments.operations` (the route's
one call), both released by one barrier. The capturer walks the payments from the first, the
canceler from the middle round to the start, so both sides win some whoever starts first.
For each payment: one 200 and one 409 (`payment_not_capturable` or `payment_not_cancelable`,
the body carrying the payment as the winner left it), its hold settled once (posted in part or
voided), the sandbox's charge closed the same way; the books verify.
"""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import operations
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.support import secrets_keys

TENANT = "race"
PAYMENTS = 24
AMOUNT_MINOR = 5000
CAPTURED_MINOR = 3000
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 180
TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=60_000)


@pytest.mark.parametrize("other", ["cancel", "capture"], ids=["capture_vs_cancel", "two_captures"])
def test_capture_racing_cancel_moves_the_money_once(database: Database, settings: Settings, other: str) -> None:
    """`other`: what the second process does to each payment (a cancel, or a capture of its own
    under another key)."""
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    url = settings.database_url
    destination = _destination(database)
    sandbox = Sandbox.open(url)
    try:
        processor = InProcessTransport(sandbox, timeout_ms=10_000)
        payment_ids = [_authorize(database, processor, destination, index) for index in range(PAYMENTS)]
    finally:
        sandbox.close()
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    middle = PAYMENTS // 2
    canceler_order = payment_ids[middle::-1] + payment_ids[:middle:-1]
    sides = [("capture", payment_ids), (other, canceler_order)]
    names = ["capture", "capture-other" if other == "capture" else "cancel"]
    processes = [
        context.Process(target=side_process, args=(url, side, order, barrier, answers, name))
        for (side, order), name in zip(sides, names, strict=True)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0, 0]
    found: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {payment_id: {} for payment_id in payment_ids}
    for _ in range(2 * PAYMENTS):
        side, payment_id, status, body = answers.get(timeout=5)
        found[payment_id][side] = (status, json.loads(body))
    if other == "capture":
        for payment_id in payment_ids:
            _check_two_captures(database, payment_id, found[payment_id])
        captured = PAYMENTS
    else:
        captured = sum(_check_one(database, payment_id, found[payment_id]) for payment_id in payment_ids)
        assert 1 <= captured <= PAYMENTS - 1, captured  # each side won some
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (captured * CAPTURED_MINOR, 0)
    print(f"captured {captured}, canceled {PAYMENTS - captured}")


def _check_one(database: Database, payment_id: str, answers: dict[str, tuple[int, dict[str, Any]]]) -> bool:
    """One side won, the other got 409 with the payment as the winner left it; the hold was
    settled once. Returns whether the capture won."""
    (capture_status, capture_body), (cancel_status, cancel_body) = answers["capture"], answers["cancel"]
    assert sorted((capture_status, cancel_status)) == [200, 409], (payment_id, answers)
    won = capture_status == 200
    loser = cancel_body if won else capture_body
    winner = capture_body if won else cancel_body
    assert loser["error"] == ("payment_not_cancelable" if won else "payment_not_capturable"), loser
    assert loser["payment"]["status"] in ("processing", "succeeded" if won else "canceled"), loser
    assert winner["status"] == ("succeeded" if won else "canceled")
    kinds = _transfer_kinds(database, payment_id)
    assert kinds == sorted(["pending", "post" if won else "void"]), (payment_id, kinds)
    return won


def _check_two_captures(database: Database, payment_id: str, answers: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """One capture won, the other got 409 `payment_not_capturable`; one post of the hold."""
    (first_status, first), (second_status, second) = answers["capture"], answers["capture-other"]
    assert sorted((first_status, second_status)) == [200, 409], (payment_id, answers)
    loser = second if first_status == 200 else first
    assert loser["error"] == "payment_not_capturable", loser
    assert _transfer_kinds(database, payment_id) == ["pending", "post"]


def _transfer_kinds(database: Database, payment_id: str) -> list[str]:
    with database.read() as connection:
        return sorted(
            str(row[0])
            for row in connection.execute(
                text("SELECT kind FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p"),
                {"t": TENANT, "p": payment_id},
            )
        )


def side_process(url: str, side: str, order: list[str], barrier: Any, answers: Any, name: str) -> None:
    database = _database(url)
    sandbox = Sandbox.open(url)
    processor = InProcessTransport(sandbox, timeout_ms=10_000)
    barrier.wait()
    try:
        for index, payment_id in enumerate(order):
            path = f"/v1/payments/{payment_id}/{side}"
            body = {"amount_minor": CAPTURED_MINOR} if side == "capture" else {}
            scope = KeyScope(TENANT, f"{name}-{index}", fingerprint("POST", path, body), now_us(), None)
            if side == "capture":
                outcome, _ = operations.capture(
                    database,
                    processor,
                    scope,
                    payment_id,
                    CAPTURED_MINOR,
                    actor=actors.LOCAL,
                    timings=TIMINGS,
                    render_refusal=render_refusal,
                )
            else:
                outcome, _ = operations.cancel(
                    database,
                    processor,
                    scope,
                    payment_id,
                    actor=actors.LOCAL,
                    timings=TIMINGS,
                    render_refusal=render_refusal,
                )
            answers.put((name, payment_id, outcome.status, outcome.body))
    finally:
        sandbox.close()
        database.dispose()


def _authorize(
    database: Database, processor: InProcessTransport, destination: str, index: int, token: str = "tok_ok"
) -> str:
    body = {"index": index}
    scope = KeyScope(TENANT, f"auth-{index}", fingerprint("POST", "/v1/payments", body), now_us(), None)
    new = NewPayment(AMOUNT_MINOR, "USD", "card", token, destination, None, {}, actors.LOCAL, capture="manual")
    outcome, _ = create_payment(database, processor, scope, new, timings=TIMINGS, render_refusal=render_refusal)
    paid = json.loads(outcome.body)
    assert (outcome.status, paid["status"]) == (201, "requires_capture"), outcome
    return str(paid["id"])


def _database(url: str) -> Database:
    return Database(Settings(database_url=url, db_pool_size=2, secrets_keys=(secrets_keys.KEY,)))


def _destination(database: Database) -> str:
    def work(connection: Any) -> str:
        account = ledger.create_account(
            connection,
            TENANT,
            code="merchant.race",
            currency="USD",
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
        return account.id

    return database.transaction(work)
