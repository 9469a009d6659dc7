#!/usr/bin/env python3
"""The processor's webhook's receive alone (`POST /v1/webhooks/processor` below HTTP): the data
plane against the reference path, in one process, on one database, alternated in rounds (ADR
0026 step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/inbound_receive_bench.py --backend sqlite --rounds 7 --count 1000

Each write receives a new signed `charge.succeeded` event (its own event id, signed as it is
sent: the signature's check is in both paths) for a payment the processor's answer settled
before the rounds (one payment a path, made by `create_payment` with an instant stand-in, not
measured): the plain case, the usual one, answered `stale`. `reference`: what the route ran
before, `inbound.service.receive` (SQLAlchemy Core: the event stored, the payment read for
update, the lifecycle's judgement, the audit event, the stored event's status). `data plane`:
`inbound.receive.receive` (the same check, the planner, then one call of
`paycore_inbound_receive` on PostgreSQL or the fixed list on SQLite).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, cast

import _phase as phase
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope
from paycore.inbound import receive, service
from paycore.kit import actors, signing
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import Processor
from payments_settle_bench import Answering

SECRET = "bench-webhook-secret"
AMOUNT_MINOR = 100
_events = itertools.count()


def settled_payment(database: Database, destination: str) -> str:
    """A payment the processor's `succeeded` answer settled."""
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=1_000)
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    scope = KeyScope(phase.TENANT, f"pay-{now_us()}", "f" * 64, now_us(), None)
    outcome, _ = create_payment(
        database, cast(Processor, Answering()), scope, new, timings=timings, render_refusal=render_refusal
    )
    answer = json.loads(outcome.body)
    assert answer["status"] == "succeeded", answer
    return str(answer["id"])


def event(payment_id: str) -> bytes:
    data = {
        "object": "charge",
        "request_id": payment_id,
        "merchant_id": phase.TENANT,
        "status": "succeeded",
        "amount_minor": AMOUNT_MINOR,
        "currency": "USD",
        "processor_charge_id": f"ch_{payment_id}",
    }
    document = {
        "id": f"evt_bench_{next(_events)}",
        "type": "charge.succeeded",
        "created_at": "2026-12-06T00:00:00Z",
        "sequence": 1,
        "data": data,
    }
    return json.dumps(document).encode()


def setup(database: Database) -> dict[str, phase.Write]:
    def destination(connection: Any) -> str:
        account = ledger.create_account(
            connection,
            phase.TENANT,
            code="merchant.main",
            currency="USD",
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
        return account.id

    account = database.transaction(destination)
    payments = {path: settled_payment(database, account) for path in phase.PATHS}

    def reference(scope: KeyScope) -> Any:
        body = event(payments["reference"])
        received = service.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "stale", received

    def data_plane(scope: KeyScope) -> Any:
        body = event(payments["data plane"])
        received = receive.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "stale", received

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("inbound_receive", "webhook", setup), __doc__)
