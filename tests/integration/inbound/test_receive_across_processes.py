"""One processor event delivered at once by several OS processes on PostgreSQL (ADR 0026 step
3): stored once, applied once, recorded once.

The processor delivers at least once, and a redelivery can overlap the first delivery (two
sandbox workers, a retry after a timeout). Before the processes start, the test makes payments
of two kinds: settled by the processor's answer (their `charge.succeeded` is the data plane's
plain case, `stale`) and left `processing` by a `pending` answer (the event settles them: the
reference path's apply, after the data plane's call found the payment not yet succeeded and
wrote nothing). Each round every process meets the others at a barrier and delivers the same
signed event for one payment through `inbound.receive.receive`. Exactly one answers `stale`
(by the data plane, checked) or `applied`; every other one `duplicate`. One stored event, one
audit event, and for a payment settled by the event one post and one state change.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from typing import Any, cast

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.inbound import receive, service
from paycore.kit import actors, signing
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import ChargeRequest, ChargeResult, Processor
from tests.support import secrets_keys

TENANT = "race_inbound"
PROCESSES = 4
ROUNDS = 16  # half of them settled first, half processing
AMOUNT_MINOR = 900
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120


def test_one_event_delivered_by_several_processes_is_stored_and_applied_once(
    database: Database, settings: Settings
) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    destination = _destination(database)
    statuses = ["succeeded" if index % 2 == 0 else "pending" for index in range(ROUNDS)]
    payments = [_payment(database, destination, status) for status in statuses]
    bodies = [_event(payment_id) for payment_id in payments]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    barrier = context.Barrier(PROCESSES, timeout=BARRIER_TIMEOUT_S)
    processes = [
        context.Process(target=deliverer, args=(settings.database_url, bodies, barrier, results))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    found: dict[int, list[tuple[str, bool]]] = {}
    for _ in range(ROUNDS * PROCESSES):
        index, result, by_reference = results.get(timeout=5)
        found.setdefault(index, []).append((result, by_reference))
    for index, status in enumerate(statuses):
        answers = Counter(result for result, _ in found[index])
        first = "stale" if status == "succeeded" else "applied"
        assert answers == Counter({first: 1, "duplicate": PROCESSES - 1}), (index, found[index])
        if first == "stale":
            assert [by_reference for result, by_reference in found[index] if result == "stale"] == [False]
        _check_one(database, payments[index], first)
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (ROUNDS * AMOUNT_MINOR, 0)


def _check_one(database: Database, payment_id: str, first: str) -> None:
    """The event's rows, once each; the payment settled once."""
    with database.read() as connection:

        def scalar(sql: str) -> Any:
            return connection.execute(text(sql), {"t": TENANT, "p": payment_id}).scalar_one()

        stored = connection.execute(
            text("SELECT status, attempts FROM processor_webhooks WHERE tenant_id = :t AND request_id = :p"),
            {"t": TENANT, "p": payment_id},
        ).all()
        audit = scalar("SELECT count(*) FROM events WHERE tenant_id = :t AND object_id = :p AND kind = 'webhook'")
        changes = scalar(
            "SELECT count(*) FROM events WHERE tenant_id = :t AND object_id = :p AND kind = 'state_change'"
        )
        posts = scalar("SELECT count(*) FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p AND kind = 'post'")
        status = scalar("SELECT status FROM payments WHERE tenant_id = :t AND id = :p")
    assert [tuple(row) for row in stored] == [("stale" if first == "stale" else "applied", 1)], stored
    assert (audit, changes, posts, status) == (1, 2, 1, "succeeded"), (payment_id, audit, changes, posts, status)


# ------------------------------------------------------------------ the delivering processes


def deliverer(url: str, bodies: list[bytes], barrier: Any, results: Any) -> None:
    database = _database(url)
    secret = database.settings.processor_webhook_secret
    real, by_reference = service.receive, []

    def spy(*args: Any, **kwargs: Any) -> service.Received:
        by_reference.append(True)
        return real(*args, **kwargs)

    service.receive = spy  # this process's own module: whether the reference path answered
    for index, body in enumerate(bodies):
        signature = signing.sign(secret, now_us() // 1_000_000, body)
        barrier.wait()
        by_reference.clear()
        received = receive.receive(database, secret, signature, body)
        results.put((index, received.result, bool(by_reference)))
    database.dispose()


# ------------------------------------------------------------------ the payments, made first


class _Answering:
    """The processor, answering each charge with the status it is made with."""

    def __init__(self, status: str) -> None:
        self.status = status

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(
            request.request_id, cast(Any, self.status), f"ch_{request.request_id}", request.amount_minor, "USD"
        )


def _payment(database: Database, destination: str, status: str) -> str:
    """A payment the processor answered `status` for: `succeeded` settles it, `pending` leaves it
    `processing`."""
    timings = PaymentTimings(processing_stale_ms=600_000, wait_ms=5_000, first_retry_ms=600_000)
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    key = f"race-{time.monotonic_ns()}"
    body = {"amount_minor": AMOUNT_MINOR, "destination": destination, "key": key}
    scope = KeyScope(TENANT, key, fingerprint("POST", "/v1/payments", body), now_us(), None)
    processor = cast(Processor, _Answering(status))
    outcome, _ = create_payment(database, processor, scope, new, timings=timings, render_refusal=render_refusal)
    answered = json.loads(outcome.body)
    assert answered["status"] == ("succeeded" if status == "succeeded" else "processing"), answered
    return str(answered["id"])


def _event(payment_id: str) -> bytes:
    data = {
        "object": "charge",
        "request_id": payment_id,
        "merchant_id": TENANT,
        "status": "succeeded",
        "amount_minor": AMOUNT_MINOR,
        "currency": "USD",
        "processor_charge_id": f"ch_{payment_id}",
    }
    event = {"id": f"evt_{payment_id}", "type": "charge.succeeded", "created_at": "", "sequence": 1, "data": data}
    return json.dumps(event).encode()


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


def _database(url: str) -> Database:
    return Database(Settings(database_url=url, db_pool_size=2, secrets_keys=(secrets_keys.KEY,)))
