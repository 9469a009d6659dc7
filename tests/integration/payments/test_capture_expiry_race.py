"""Capture racing expiry on one authorization, from two OS processes on PostgreSQL (SPEC §6.1,
issue 40 point 5): the processor's word decides, the money moves once, the capture that lost
gets 409 `payment_not_capturable` with the payment.

Two processes start and wait on one barrier with the main one; then the main process authorizes
PAYMENTS payments with `tok_expires_quickly` (2-second lifetime) through the real sandbox (its
tables beside paycore's, in the test's database), spaced out, and hands both processes the same
start instant: the expiry of the payment a third of the way in. From it, one process captures
each payment (part of it, its own key, through `payments.operations.capture`, the route's one
call), from the newest to the oldest; the other runs the SANDBOX's own expiry round
(`settle_due`) and delivers the signed `charge.expired` webhooks it queues to paycore's receive
(`inbound.receive.receive`, what the route calls), round after round, until the captures are
done and nothing is left. The oldest payments expire before any capture reaches them, the
newest are captured before their expiry; in between the two meet.

The truth is the sandbox's charge. `captured`: the payment `succeeded` with the captured amount,
the capture answered 200, its hold posted once. `expired`: the payment `canceled` with
`cancellation_reason` "expired", the capture answered 409 `payment_not_capturable` with the
payment (`requires_capture` when the processor refused the capture as expired before its
webhook came, `canceled` when the webhook came first), its hold voided once. The books verify.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import func, select

from paycore.audit import service as audit
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.inbound import receive as inbound
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.kit.signing import SIGNATURE_HEADER
from paycore.ledger import service as ledger
from paycore.payments import lifecycle, operations
from paycore.payments.types import Payment
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import charges, webhooks
from paycore_sandbox.service import Sandbox
from tests.integration.payments.test_capture_race_processes import (
    TIMINGS,
    _authorize,
    _database,
    _destination,
    _transfer_kinds,
)

TENANT = "race"  # the tenant `_authorize` and `_destination` write under
PAYMENTS = 16
AMOUNT_MINOR = 5000  # what `_authorize` authorizes
CAPTURED_MINOR = 3000
SPACING_S = 0.05  # between two authorizations: their expiries are as far apart
BARRIER_TIMEOUT_S = 60
JOIN_TIMEOUT_S = 120
IDLE_ROUNDS_S = 0.01


def test_capture_racing_expiry_follows_the_processor(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    url = settings.database_url
    secret = settings.processor_webhook_secret
    Sandbox.open(url).close()  # its tables, made once before the processes open it
    context = multiprocessing.get_context("spawn")
    answers, orders = context.Queue(), [context.Queue(), context.Queue()]
    barrier = context.Barrier(3, timeout=BARRIER_TIMEOUT_S)
    captures_done = context.Event()
    processes = [
        context.Process(target=capturer, args=(url, barrier, orders[0], answers, captures_done)),
        context.Process(target=expirer, args=(url, secret, barrier, orders[1], answers, captures_done)),
    ]
    for process in processes:
        process.start()
    barrier.wait()  # both ready: the authorizations' lifetimes start now
    destination = _destination(database)
    payment_ids = _authorize_spaced(database, url, destination)
    # From the expiry of the one a third in: the older ones are past theirs, the newest has over
    # half a second left (10 spacings), time enough for a loaded machine's first capture.
    start_at_us = _load(database, payment_ids[PAYMENTS // 3]).authorization_expires_at_us
    assert start_at_us is not None
    orders[0].put((start_at_us, payment_ids[::-1]))  # the capturer: newest first
    orders[1].put((start_at_us, payment_ids))
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0, 0]
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    delivered: dict[str, Any] = {}
    for _ in range(PAYMENTS + 1):
        kind, payment_id, status, body = answers.get(timeout=5)
        if kind == "delivered":
            delivered = json.loads(body)
            continue
        found[payment_id] = (status, json.loads(body))
    assert delivered["refused"] == [], delivered  # every webhook taken (a 500 would be a bug)
    assert set(delivered["results"]) <= {"applied", "stale", "duplicate"}, delivered  # none contradicts
    ways = Counter(_check_one(database, url, payment_id, *found[payment_id]) for payment_id in payment_ids)
    captured = ways["captured"]
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (captured * CAPTURED_MINOR, 0)
    assert 1 <= captured <= PAYMENTS - 1, captured  # each side won some
    print(f"captured {captured}, expired {PAYMENTS - captured}: {dict(ways)}; webhooks {delivered['results']}")


def _authorize_spaced(database: Database, url: str, destination: str) -> list[str]:
    sandbox = Sandbox.open(url)
    try:
        processor = InProcessTransport(sandbox, timeout_ms=10_000)
        payment_ids = []
        for index in range(PAYMENTS):
            if index:
                time.sleep(SPACING_S)
            payment_ids.append(_authorize(database, processor, destination, index, token="tok_expires_quickly"))
        return payment_ids
    finally:
        sandbox.close()


def _check_one(database: Database, url: str, payment_id: str, status: int, body: dict[str, Any]) -> str:
    """The payment ends as its sandbox charge proves, the capture's answer says so, the hold was
    settled once. Returns how: `captured`; or expired and the capture `refused` by the processor
    (its webhook came after), expired `in_flight` (the webhook came while the capture was out),
    expired `before` the capture began."""
    payment = _load(database, payment_id)
    charge = _charge(url, payment)
    assert charge["status"] in ("captured", "expired"), (payment_id, charge)
    won = charge["status"] == "captured"
    kinds = _transfer_kinds(database, payment_id)
    if won:
        assert (payment.status, payment.amount_captured_minor) == ("succeeded", CAPTURED_MINOR), payment
        assert charge["captured_minor"] == CAPTURED_MINOR, charge
        assert (status, body["status"], body["amount_captured_minor"]) == (200, "succeeded", CAPTURED_MINOR), body
        assert kinds == ["pending", "post"], (payment_id, kinds)
        return "captured"
        assert (payment.status, payment.cancellation_reason) == ("canceled", "expired"), payment
        assert (status, body["error"]) == (409, "payment_not_capturable"), (payment_id, status, body)
        assert body["payment"]["id"] == payment_id, body
        assert body["payment"]["status"] in ("requires_capture", "canceled"), body
        assert kinds == ["pending", "void"], (payment_id, kinds)
    if body["payment"]["status"] == "requires_capture":
        return "refused"
    return "in_flight" if ("processing", "canceled") in _moves(database, payment_id) else "before"


def _moves(database: Database, payment_id: str) -> list[tuple[str | None, str | None]]:
    with database.read() as connection:
        return [
            (event.from_state, event.to_state) for event in audit.events_of(connection, TENANT, payment_id, limit=50)
        ]


def _load(database: Database, payment_id: str) -> Payment:
    with database.read() as connection:
        return lifecycle.MACHINE.load(connection, TENANT, payment_id)


def _charge(url: str, payment: Payment) -> dict[str, Any]:
    sandbox = Sandbox.open(url)
    try:
        with sandbox.database.read() as connection:
            found = select(charges).where(charges.c.processor_charge_id == payment.processor_reference)
            return dict(connection.execute(found).mappings().one())
    finally:
        sandbox.close()


def _sleep_until(at_us: int) -> None:
    time.sleep(max(0, at_us - now_us()) / 1_000_000)


def capturer(url: str, barrier: Any, orders: Any, answers: Any, captures_done: Any) -> None:
    database = _database(url)
    sandbox = Sandbox.open(url)
    processor = InProcessTransport(sandbox, timeout_ms=10_000)
    try:
        barrier.wait()
        start_at_us, order = orders.get(timeout=JOIN_TIMEOUT_S)
        _sleep_until(start_at_us)
        for index, payment_id in enumerate(order):
            path = f"/v1/payments/{payment_id}/capture"
            body = {"amount_minor": CAPTURED_MINOR}
            scope = KeyScope(TENANT, f"capture-{index}", fingerprint("POST", path, body), now_us(), None)
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
            answers.put(("capture", payment_id, outcome.status, outcome.body))
    finally:
        captures_done.set()
        sandbox.close()
        database.dispose()


def expirer(url: str, secret: str, barrier: Any, orders: Any, answers: Any, captures_done: Any) -> None:
    """The sandbox's background work as it runs it: expire what is due, deliver what is queued
    to paycore's receive; until the captures are done and a round finds nothing to do."""
    database = _database(url)
    sandbox = Sandbox.open(url)
    refused: list[str] = []
    results: Counter[str] = Counter()

    def sink(body: bytes, headers: dict[str, str]) -> int:
        signature = next((value for name, value in headers.items() if name.lower() == SIGNATURE_HEADER.lower()), None)
        try:
            results[inbound.receive(database, secret, signature, body).result] += 1
        except Exception as error:  # a webhook paycore did not take is the failure under test
            refused.append(f"{type(error).__name__}: {error}")
            return 500
        return 200

    try:
        barrier.wait()
        start_at_us, order = orders.get(timeout=JOIN_TIMEOUT_S)
        _sleep_until(start_at_us)
        deadline_s = time.monotonic() + JOIN_TIMEOUT_S / 2
        while time.monotonic() < deadline_s:
            done = captures_done.is_set()  # read before the round: a round after it sees all
            changed = sandbox.settle_due() + sandbox.deliver_due(sink)
            if done and changed == 0 and _all_closed(sandbox, len(order)):
                break
            if changed == 0:
                time.sleep(IDLE_ROUNDS_S)
    finally:
        answers.put(("delivered", "", 0, json.dumps({"refused": refused, "results": results})))
        sandbox.close()
        database.dispose()


def _all_closed(sandbox: Sandbox, count: int) -> bool:
    """Every authorization of the run closed at the sandbox, every event it queued delivered."""
    with sandbox.database.read() as connection:
        closed = connection.execute(
            select(func.count()).select_from(charges).where(charges.c.status.in_(("captured", "expired")))
        ).scalar_one()
        waiting = connection.execute(
            select(func.count()).select_from(webhooks).where(webhooks.c.state == "pending")
        ).scalar_one()
    return bool(closed >= count and waiting == 0)
