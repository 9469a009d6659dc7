"""The processor's webhook and the resolver's status query, racing to settle the same payments
from two OS processes on PostgreSQL (ADR 0026 step 3): each hold is posted exactly once.

The payments are made `in_doubt` first (the processor's answer lost). Then one process delivers
each payment's signed `charge.succeeded` webhook (`inbound.receive.receive`, as the route does:
the data plane's apply phase, one call of `paycore_inbound_apply_payment`, which reads the
payment under its lock, or the reference path where the payment moved first), last payment first; the other runs
the resolver's rounds (`payments.rounds.resolve_due`: claim a few due payments, ask the processor,
which says `succeeded`, apply it FOR UPDATE), first payment first. They meet in the middle, each
side seen to win some. Whoever comes second changes nothing: one post, its two entries, one
state change to `succeeded` (the webhook's or the resolver's), the money moved once, and the
webhook's answer `applied` exactly where it won.
"""

from __future__ import annotations

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
from paycore.inbound import receive as inbound
from paycore.inbound import service as inbound_service
from paycore.kit import actors, signing
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.payments import rounds
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import ChargeRequest, ChargeResult, Processor, ProcessorUnreachable
from tests.integration.payments.test_settle_across_processes import _database, _destination, _event
from tests.support.settled import read_settled

TENANT = "race"  # as test_settle_across_processes's helpers make it
PAYMENTS = 24
AMOUNT_MINOR = 700
BATCH_MAX = 2  # the resolver's claim per round: small, so the two sides meet in the middle
ROUNDS_MAX = 200  # the resolver's rounds, bounded
BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120


class _Lost:
    """The processor whose answer to the creating request is lost: every payment `in_doubt`."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        raise ProcessorUnreachable("the answer was lost")


class _Succeeded:
    """The processor as the resolver asks it: every charge `succeeded`."""

    def get_charge(self, request_id: str) -> ChargeResult:
        return ChargeResult(request_id, "succeeded", f"ch_{request_id}", AMOUNT_MINOR, "USD")

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return self.get_charge(request.request_id)


def test_a_webhook_and_the_resolver_racing_post_each_hold_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    destination = _destination(database)
    payment_ids = [_in_doubt(database, destination) for _ in range(PAYMENTS)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    webhook_results, resolver_rounds = context.Queue(), context.Queue()
    url = settings.database_url
    hook = context.Process(target=webhook_process, args=(url, payment_ids[::-1], barrier, webhook_results))
    resolver = context.Process(target=resolver_process, args=(url, barrier, resolver_rounds))
    hook.start()
    resolver.start()
    hook.join(JOIN_TIMEOUT_S)
    resolver.join(JOIN_TIMEOUT_S)
    assert (hook.exitcode, resolver.exitcode) == (0, 0)
    results = dict(webhook_results.get(timeout=5) for _ in range(PAYMENTS))
    assert resolver_rounds.get(timeout=5) <= ROUNDS_MAX
    winners: Counter[str] = Counter()
    for payment_id in payment_ids:
        winner = _check_one(database, payment_id)
        result, by_reference = results[payment_id]
        assert (result == "applied") == (winner == "webhook"), (payment_id, result, winner)
        winners[winner if winner == "resolver" or by_reference else "webhook on the data plane"] += 1
    assert winners["resolver"] >= 1 and winners["webhook on the data plane"] >= 1, winners
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (PAYMENTS * AMOUNT_MINOR, 0)
    print(f"settled by: {dict(winners)}")


def _in_doubt(database: Database, destination: str) -> str:
    body = {"amount_minor": AMOUNT_MINOR, "destination": destination}
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    key = f"race-{time.monotonic_ns()}"
    scope = KeyScope(TENANT, key, fingerprint("POST", "/v1/payments", body), now_us(), None)
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=0)
    outcome, _ = create_payment(
        database, cast(Processor, _Lost()), scope, new, timings=timings, render_refusal=render_refusal
    )
    assert outcome.status == 202 and '"status":"in_doubt"' in outcome.body, outcome
    return str(outcome.body.split('"id":"', 1)[1].split('"', 1)[0])


def _check_one(database: Database, payment_id: str) -> str:
    """The payment's rows, once each; returns who settled it (the cause of its last change)."""
    with database.read() as connection:
        facts = read_settled(connection, TENANT, payment_id)
        kinds, entries, changes = facts.transfer_kinds, facts.entries, facts.changes
        stored = connection.execute(
            text("SELECT count(*) FROM processor_webhooks WHERE tenant_id = :t AND request_id = :p"),
            {"t": TENANT, "p": payment_id},
        ).scalar_one()
    assert kinds == ["pending", "post"] and entries == 4, (payment_id, kinds, entries)
    assert [(row[0], row[2]) for row in changes] == [("processing", 1), ("in_doubt", 2), ("succeeded", 3)], changes
    assert changes[2][1] in ("webhook", "resolver") and stored == 1, (changes, stored)
    return str(changes[2][1])


# ------------------------------------------------------------------ the two processes


def webhook_process(url: str, payment_ids: list[str], barrier: Any, results: Any) -> None:
    database = _database(url)
    secret = database.settings.processor_webhook_secret
    real, referenced = inbound_service.receive, []

    def spy(*args: Any, **kwargs: Any) -> inbound_service.Received:
        referenced.append(True)
        return real(*args, **kwargs)

    inbound_service.receive = spy  # this process's own module: whether the reference path answered
    barrier.wait()
    for payment_id in payment_ids:
        body = _event(payment_id)
        signature = signing.sign(secret, now_us() // 1_000_000, body)
        referenced.clear()
        received = inbound.receive(database, secret, signature, body)
        results.put((payment_id, (received.result, bool(referenced))))
    database.dispose()


def resolver_process(url: str, barrier: Any, rounds_done: Any) -> None:
    database = _database(url)
    policy = Policy(attempts_max=5, backoff_ms=1, backoff_max_ms=2, lease_ms=30_000, batch_max=BATCH_MAX)
    processor = cast(Processor, _Succeeded())
    barrier.wait()
    done = 0
    while done < ROUNDS_MAX:
        done += 1
        if rounds.resolve_due(database, processor, policy, "resolver-race", actor=actors.worker("resolve")) == 0:
            break
    rounds_done.put(done)
    database.dispose()
