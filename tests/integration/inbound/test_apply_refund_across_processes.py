"""The processor's refund webhook and the refund resolver's status query, racing to settle the same
refunds from two OS processes on PostgreSQL (ADR 0026 step 3): each refund's hold is posted
exactly once.

The refunds (of one payment) are sent and made `in_doubt` first (the processor's answer lost).
Then one process delivers each refund's signed `refund.succeeded` webhook (`inbound.receive.receive`,
as the route does: the read and one call of `paycore_inbound_apply_refund`, or the reference path
where the refund moved between the read and the call), last refund first; the other runs the
resolver's rounds (`refunds.rounds.resolve_due`: claim a few due refunds, ask the processor, which
says `succeeded`, apply it FOR UPDATE), first refund first. They meet in the middle, each side
seen to win some. Whoever comes second changes nothing: one post, its two entries, one state
change to `succeeded` (the webhook's or the resolver's), the money moved once, the payment's
refunded amount untouched, and the webhook's answer `applied` exactly where it won.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any, cast

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, fingerprint
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import (
    ChargeRequest,
    ChargeResult,
    Processor,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
)
from paycore.refunds import rounds as refund_rounds
from paycore.refunds import service as refunds
from tests.integration.inbound.racing import race, until_both_win
from tests.integration.inbound.racing import winners as racing_winners
from tests.integration.payments.test_settle_across_processes import _database, _destination

TENANT = "race"  # as test_settle_across_processes's helpers make it
REFUNDS = 24
AMOUNT_MINOR = 700
BATCH_MAX = 2  # the resolver's claim per round: small, so the two sides meet in the middle
ROUNDS_MAX = 200  # the resolver's rounds, bounded


class _Processor:
    """The processor: every charge succeeds; a refund's answer is lost (`lost`), or, asked
    about, the refund succeeded."""

    def __init__(self, *, lost: bool) -> None:
        self.lost = lost

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, "USD")

    def refund(self, request: RefundRequest) -> RefundResult:
        if self.lost:
            raise ProcessorUnreachable("the answer was lost")
        return self._refund(request.request_id)

    def get_refund(self, request_id: str) -> RefundResult:
        return self._refund(request_id)

    def _refund(self, request_id: str) -> RefundResult:
        return RefundResult(request_id, "succeeded", f"re_{request_id}", AMOUNT_MINOR, "USD")


def _policy() -> Policy:
    return Policy(attempts_max=5, backoff_ms=1, backoff_max_ms=2, lease_ms=30_000, batch_max=BATCH_MAX)


def test_a_refund_webhook_and_the_resolver_racing_post_each_hold_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")
    destination = _destination(database)

    def race_once() -> Counter[str]:
        payment_id = _paid(database, destination)
        refund_ids = _in_doubt(database, payment_id)
        results, rounds = race(settings.database_url, refund_ids, _event, resolver_process)
        assert rounds <= ROUNDS_MAX
        found = racing_winners(refund_ids, results, lambda object_id: _check_one(database, object_id))
        with database.read() as connection:
            refunded = connection.execute(
                text("SELECT refunded_minor FROM payments WHERE tenant_id = :t AND id = :p"),
                {"t": TENANT, "p": payment_id},
            ).scalar_one()
        assert refunded == REFUNDS * AMOUNT_MINOR
        return found

    winners, _races = until_both_win(race_once)
    with database.read() as connection:
        account = ledger.get_account(connection, TENANT, destination)
        assert ledger.verify(connection).problems == []
    assert (account.balance.posted_minor, account.balance.pending_minor) == (0, 0), "every refund paid back once"
    print(f"settled by: {dict(winners)}")


def _paid(database: Database, destination: str) -> str:
    """A succeeded payment of every refund's amount together."""
    amount_minor = REFUNDS * AMOUNT_MINOR
    body = {"amount_minor": amount_minor, "destination": destination}
    new = NewPayment(amount_minor, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    key = f"race-{time.monotonic_ns()}"
    scope = KeyScope(TENANT, key, fingerprint("POST", "/v1/payments", body), now_us(), None)
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=0)
    processor = cast(Processor, _Processor(lost=False))
    outcome, _ = create_payment(database, processor, scope, new, timings=timings, render_refusal=render_refusal)
    assert outcome.status == 201, outcome
    return str(json.loads(outcome.body)["id"])


def _in_doubt(database: Database, payment_id: str) -> list[str]:
    """The refunds, created and sent, their answers lost: each `in_doubt`."""
    made = [
        database.transaction(
            lambda connection: refunds.create_refund(
                connection, TENANT, refunds.NewRefund(payment_id, AMOUNT_MINOR), now_us=now_us(), actor=actors.LOCAL
            )
        ).id
        for _ in range(REFUNDS)
    ]
    lost = cast(Processor, _Processor(lost=True))
    policy = Policy(attempts_max=5, backoff_ms=1, backoff_max_ms=2, lease_ms=30_000, batch_max=REFUNDS)
    assert refund_rounds.send_due(database, lost, policy, "sender", actor=actors.worker("send")) == REFUNDS
    with database.read() as connection:
        found = refunds.MACHINE.find_many(connection, [(TENANT, refund_id) for refund_id in made])
    assert {refund.status for refund in found.values()} == {"in_doubt"}, found
    return made


def _check_one(database: Database, refund_id: str) -> str:
    """The refund's rows, once each; returns who settled it (the cause of its last change)."""
    params = {"t": TENANT, "r": refund_id}
    with database.read() as connection:
        kinds = [
            row[0]
            for row in connection.execute(
                text("SELECT kind FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :r ORDER BY kind"), params
            )
        ]
        entries = connection.execute(
            text(
                "SELECT count(*) FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
                " AND t.id = e.transfer_id WHERE t.tenant_id = :t AND t.owner_id = :r"
            ),
            params,
        ).scalar_one()
        changes = connection.execute(
            text(
                "SELECT to_state, cause, object_sequence FROM events WHERE tenant_id = :t AND object_id = :r"
                " AND kind = 'state_change' ORDER BY object_sequence"
            ),
            params,
        ).all()
        stored = connection.execute(
            text("SELECT count(*) FROM processor_webhooks WHERE tenant_id = :t AND request_id = :r"), params
        ).scalar_one()
    assert kinds == ["pending", "post"] and entries == 4, (refund_id, kinds, entries)
    expected = [("pending", 1), ("processing", 2), ("in_doubt", 3), ("succeeded", 4)]
    assert [(row[0], row[2]) for row in changes] == expected, changes
    assert changes[3][1] in ("webhook", "resolver") and stored == 1, (changes, stored)
    return str(changes[3][1])


# ------------------------------------------------------------------ the two processes


def _event(refund_id: str) -> bytes:
    data = {
        "object": "refund",
        "request_id": refund_id,
        "merchant_id": TENANT,
        "status": "succeeded",
        "amount_minor": AMOUNT_MINOR,
        "currency": "USD",
        "processor_refund_id": f"re_{refund_id}",
    }
    event = {"id": f"evt_{refund_id}", "type": "refund.succeeded", "created_at": "", "sequence": 1, "data": data}
    return json.dumps(event).encode()


def resolver_process(url: str, barrier: Any, rounds: Any) -> None:
    database = _database(url)
    processor = cast(Processor, _Processor(lost=False))
    barrier.wait()
    done = 0
    while done < ROUNDS_MAX:
        done += 1
        if (
            refund_rounds.resolve_due(database, processor, _policy(), "resolver-race", actor=actors.worker("resolve"))
            == 0
        ):
            break
    rounds.put(done)
    database.dispose()
