"""The API's settle phase and the processor's webhook, racing on one payment from two OS
processes on PostgreSQL (ADR 0026 step 3): the hold is posted exactly once.

One process makes payments (`create_payment`, whose settle phase is the one call of
`paycore_payments_settle`); its processor answers `succeeded` and, before the answer returns,
hands the payment to the other process and waits for it at a barrier. The other process then
delivers the processor's signed webhook for it (`inbound.receive.receive`, as the route does:
on the data plane, the webhook's row and `stale` where the API settled the payment first, else
the reference path's row, the payment read FOR UPDATE and the lifecycle's apply) while the
first runs its settle phase. Some
rounds hold one side back a little, so that each side is seen to win; the rest race as they
come. The API's side is the data plane each time it wins (checked), the reference path's
replay each time it loses. Whoever comes second changes nothing: one post, two entries, one state change to
`succeeded`, the key answered once, and the API's answer is the one recorded.
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
from paycore.idempotency.service import KeyScope, Outcome, fingerprint
from paycore.inbound import receive as inbound
from paycore.kit import actors, signing
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import settle
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import ChargeRequest, ChargeResult, Processor
from tests.support import secrets_keys
from tests.support.settled import read_settled

TENANT = "race"
ROUNDS = 24
AMOUNT_MINOR = 700
HELD_BACK_S = 0.02  # a side held back this long after the barrier lets the other one win
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120


def held_back(round_index: int) -> str | None:
    """Which side waits a little in this round: the API, the webhook, or neither (a true race)."""
    return ("api", "webhook", None)[round_index % 3]


def test_the_api_and_a_webhook_racing_post_the_hold_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    destination = _destination(database)
    context = multiprocessing.get_context("spawn")
    handed, answers, webhook_results = context.Queue(), context.Queue(), context.Queue()
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    url = settings.database_url
    api = context.Process(target=api_process, args=(url, destination, handed, barrier, answers))
    hook = context.Process(target=webhook_process, args=(url, handed, barrier, webhook_results))
    api.start()
    hook.start()
    api.join(JOIN_TIMEOUT_S)
    hook.join(JOIN_TIMEOUT_S)
    assert (api.exitcode, hook.exitcode) == (0, 0)
    outcomes = [answers.get(timeout=5) for _ in range(ROUNDS)]
    results = [webhook_results.get(timeout=5) for _ in range(ROUNDS)]
    assert Counter(results) - Counter({"applied": ROUNDS, "stale": ROUNDS}) == Counter(), results
    winners: Counter[str] = Counter()
    for key, status, body, by_data_plane in outcomes:
        winner = _check_one(database, key, status, body)
        assert by_data_plane == (winner == "processor_answer"), (key, winner)
        winners[winner] += 1
    assert winners["processor_answer"] >= 1 and winners["webhook"] >= 1, winners
    assert winners["webhook"] == results.count("applied"), (winners, results)
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (ROUNDS * AMOUNT_MINOR, 0)
    print(f"settled by: {dict(winners)}")


def _check_one(database: Database, key: str, status: int, body: str) -> str:
    """The payment's rows, once each; returns who settled it (the cause of its change)."""
    payment_id = json.loads(body)["id"]
    with database.read() as connection:
        facts = read_settled(connection, TENANT, payment_id)
        kinds, entries, changes = facts.transfer_kinds, facts.entries, facts.changes
        calls = connection.execute(
            text("SELECT count(*) FROM events WHERE tenant_id = :t AND object_id = :p AND kind = 'processor_call'"),
            {"t": TENANT, "p": payment_id},
        ).scalar_one()
        answer = connection.execute(
            text('SELECT response_status, response_body FROM idempotency_keys WHERE tenant_id = :t AND "key" = :k'),
            {"t": TENANT, "k": key},
        ).one()
    assert kinds == ["pending", "post"] and entries == 4, (payment_id, kinds, entries)
    assert [(row[0], row[2]) for row in changes] == [("processing", 1), ("succeeded", 2)], changes
    assert calls == 1, "the API's call is recorded once, whoever settled"
    assert (answer.response_status, answer.response_body) == (status, body) and status == 201
    return str(changes[1][1])


# ------------------------------------------------------------------ the two processes


class _Answering:
    """The processor: answers `succeeded`, after handing the payment to the webhook's process
    and meeting it at the barrier (the webhook is sent as the answer returns)."""

    def __init__(self, handed: Any, barrier: Any) -> None:
        self.handed, self.barrier, self.rounds = handed, barrier, 0

    def charge(self, request: ChargeRequest) -> ChargeResult:
        result = ChargeResult(request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, "USD")
        self.handed.put((request.request_id, self.rounds))
        self.barrier.wait()
        if held_back(self.rounds) == "api":
            time.sleep(HELD_BACK_S)
        self.rounds += 1
        return result


def api_process(url: str, destination: str, handed: Any, barrier: Any, answers: Any) -> None:
    database = _database(url)
    real, written = settle.settle, []

    def spy(*args: Any, **kwargs: Any) -> Outcome | None:
        answer = real(*args, **kwargs)
        written.append(answer is not None)
        return answer

    settle.settle = spy  # this process's own module: whether the data plane wrote each payment
    processor = cast(Processor, _Answering(handed, barrier))
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=1_000)
    for _ in range(ROUNDS):
        body = {"amount_minor": AMOUNT_MINOR, "destination": destination}
        new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
        key = f"race-{time.monotonic_ns()}"
        scope = KeyScope(TENANT, key, fingerprint("POST", "/v1/payments", body), now_us(), None)
        outcome, replayed = create_payment(
            database, processor, scope, new, timings=timings, render_refusal=render_refusal
        )
        assert not replayed
        answers.put((key, outcome.status, outcome.body, written[-1]))
    database.dispose()


def webhook_process(url: str, handed: Any, barrier: Any, results: Any) -> None:
    database = _database(url)
    secret = database.settings.processor_webhook_secret
    for _ in range(ROUNDS):
        payment_id, round_index = handed.get(timeout=BARRIER_TIMEOUT_S)
        body = _event(payment_id)
        signature = signing.sign(secret, now_us() // 1_000_000, body)
        barrier.wait()
        if held_back(round_index) == "webhook":
            time.sleep(HELD_BACK_S)
        results.put(inbound.receive(database, secret, signature, body).result)
    database.dispose()


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
