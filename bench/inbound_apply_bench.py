#!/usr/bin/env python3
"""The processor's webhook that moves a payment, alone (`POST /v1/webhooks/processor` below
HTTP): the data plane against the reference path, in one process, on one database, alternated
in rounds (ADR 0026 step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/inbound_apply_bench.py --backend sqlite --rounds 5 --count 200

Each write receives a new signed `charge.succeeded` event for its own payment left `in_doubt`
before the rounds (its answer lost: made by `create_payment` with a stand-in whose answer never
comes, not measured), which the event settles: the hold posted, the state event, the audit
event, the stored event. `reference`: what the route ran before, `inbound.service.receive`
(SQLAlchemy Core: the event stored, the payment read for update, the lifecycle's apply, the
events read back, the audit event, the stored event's status). `data plane`:
`inbound.receive.receive` as the route runs it (the same check; the plain case's attempt, which
writes nothing here; the payment's read, the planner, then one call of `paycore_inbound_apply`
on PostgreSQL or the fixed list on SQLite).
"""

from __future__ import annotations

import argparse
import json
from collections import deque
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
from paycore.processor.port import ChargeRequest, ChargeResult, Processor, ProcessorUnreachable

SECRET = "bench-webhook-secret"
AMOUNT_MINOR = 100


class Lost:
    """The processor's stand-in whose answer never comes: the payment is left `in_doubt`."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        raise ProcessorUnreachable("the answer was lost")


def in_doubt_payment(database: Database, destination: str) -> str:
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=3_600_000)
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    scope = KeyScope(phase.TENANT, f"pay-{phase.key_scope().key}", "f" * 64, now_us(), None)
    outcome, _ = create_payment(
        database, cast(Processor, Lost()), scope, new, timings=timings, render_refusal=render_refusal
    )
    answer = json.loads(outcome.body)
    assert answer["status"] == "in_doubt", answer
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
        "id": f"evt_{payment_id}",
        "type": "charge.succeeded",
        "created_at": "2026-12-06T00:00:00Z",
        "sequence": 1,
        "data": data,
    }
    return json.dumps(document).encode()


def payments_needed() -> int:
    """A payment a write: the warm-up's and every round's, as `_phase.run` makes them."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=1000)
    args, _ = parser.parse_known_args()
    return args.count // 4 + args.rounds * args.count


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
    needed = payments_needed()
    waiting = {path: deque(in_doubt_payment(database, account) for _ in range(needed)) for path in phase.PATHS}
    print(f"{needed} payments in doubt a path", flush=True)

    def reference(scope: KeyScope) -> Any:
        body = event(waiting["reference"].popleft())
        received = service.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "applied", received

    def data_plane(scope: KeyScope) -> Any:
        body = event(waiting["data plane"].popleft())
        received = receive.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "applied", received

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("inbound_apply", "webhook", setup), __doc__)
