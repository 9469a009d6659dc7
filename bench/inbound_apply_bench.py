#!/usr/bin/env python3
"""The processor's webhook that moves a payment, alone (`POST /v1/webhooks/processor` below
HTTP): the data plane against the reference path, in one process, on one database, alternated
in rounds (ADR 0026 step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/inbound_apply_bench.py --backend sqlite --rounds 5 --count 200
    .venv/bin/python bench/inbound_apply_bench.py --backend sqlite --object refund

`--object refund`: each write's event is a `refund.succeeded` for its own refund left `in_doubt`
(one payment's refunds, its answer lost; the data plane's call is `paycore_inbound_apply_refund`).
`--object payout`: a `payout.accepted` for its own payout left `in_doubt` (the bank's answer
lost; `paycore_inbound_apply_payout`), which moves it to `sent`. `--object payout_settled`: a
`payout.settled` with the bank's fee for its own payout `sent` (the bank accepted it at once;
`paycore_inbound_settle_payout`), which settles it and books the fee.

Each write receives a new signed `charge.succeeded` event for its own payment left `in_doubt`
before the rounds (its answer lost: made by `create_payment` with a stand-in whose answer never
comes, not measured), which the event settles: the hold posted, the state event, the audit
event, the stored event. `reference`: what the route ran before, `inbound.service.receive`
(SQLAlchemy Core: the event stored, the payment read for update, the lifecycle's apply, the
events read back, the audit event, the stored event's status). `data plane`:
`inbound.receive.receive` as the route runs it (the same check; the plain case's attempt, which
writes nothing here; on PostgreSQL the planner, then one call of `paycore_inbound_apply_payment`,
which reads the payment itself; on SQLite the payment's read, the planner and the fixed list).
"""

from __future__ import annotations

import argparse
import json
import sys
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
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.lifecycle.policy import Policy
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.payouts import rounds as payout_rounds
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary
from paycore.processor.port import (
    ChargeRequest,
    ChargeResult,
    PayoutRequest,
    PayoutResult,
    Processor,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
)
from paycore.refunds import rounds as refund_rounds
from paycore.refunds import service as refunds

SECRET = "bench-webhook-secret"
AMOUNT_MINOR = 100


class Lost:
    """The processor's stand-in whose answer never comes: the payment (refund, payout) is left
    `in_doubt`."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        raise ProcessorUnreachable("the answer was lost")

    def refund(self, request: RefundRequest) -> RefundResult:
        raise ProcessorUnreachable("the answer was lost")

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        raise ProcessorUnreachable("the answer was lost")


class Accepting:
    """The bank's stand-in that accepts a payout at once: it is `sent`, its settlement to come."""

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        return PayoutResult(request.request_id, "accepted", f"bp_{request.request_id}", AMOUNT_MINOR, "USD", "ach")


class Charging:
    """The processor's stand-in that charges at once: the refunds' payment."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, "USD")


_POLICY = Policy(attempts_max=5, backoff_ms=3_600_000, backoff_max_ms=3_600_000, lease_ms=30_000, batch_max=1_000)
ACH = Beneficiary(name="Ada Lovelace", routing_number="110000000", account_number="000123456789")


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


def in_doubt_refunds(database: Database, destination: str, count: int) -> list[str]:
    """`count` refunds of one payment, sent, their answers lost."""
    new = NewPayment(AMOUNT_MINOR * count, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL)
    scope = KeyScope(phase.TENANT, f"pay-{phase.key_scope().key}", "f" * 64, now_us(), None)
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=3_600_000)
    outcome, _ = create_payment(
        database, cast(Processor, Charging()), scope, new, timings=timings, render_refusal=render_refusal
    )
    payment_id = json.loads(outcome.body)["id"]
    refund = refunds.NewRefund(payment_id, AMOUNT_MINOR)
    made = [
        database.transaction(
            lambda connection: refunds.create_refund(
                connection, phase.TENANT, refund, now_us=now_us(), actor=actors.LOCAL
            )
        ).id
        for _ in range(count)
    ]
    while refund_rounds.send_due(database, cast(Processor, Lost()), _POLICY, "bench", actor=actors.LOCAL):
        pass
    return made


def in_doubt_payouts(database: Database, source: str, count: int, bank: Any = None) -> list[str]:
    """`count` payouts from `source` (funded for them first), queued and sent, the bank's
    answers lost (or given by `bank`)."""

    def fund(connection: Any) -> None:
        funding = ledger.create_account(
            connection,
            phase.TENANT,
            code=f"funding.{now_us()}",
            currency="USD",
            normal_balance="debit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
        amount_minor = AMOUNT_MINOR * count
        entries = (EntrySpec(funding.id, "debit", amount_minor), EntrySpec(source, "credit", amount_minor))
        ledger.create_transfer(connection, phase.TENANT, TransferSpec(entries=entries), now_us=now_us())

    database.transaction(fund)
    new = NewPayout(AMOUNT_MINOR, "USD", source, "ach", ACH)
    made = [
        database.transaction(
            lambda connection: payouts.schedule(connection, phase.TENANT, new, now_us=now_us(), actor=actors.LOCAL)
        ).id
        for _ in range(count)
    ]
    while payout_rounds.queue_due(database, 1_000, actor=actors.LOCAL):
        pass
    while payout_rounds.send_due(database, cast(Processor, bank or Lost()), _POLICY, "bench", actor=actors.LOCAL):
        pass
    return made


_EVENTS = {  # the object's event: its type and the fields beyond every event's
    "charge": ("charge.succeeded", {"status": "succeeded", "processor_charge_id": "ch_1"}),
    "refund": ("refund.succeeded", {"status": "succeeded", "processor_refund_id": "re_1"}),
    "payout": ("payout.accepted", {"status": "accepted", "rail": "ach", "bank_payout_id": "bp_1", "batch_id": "b1"}),
    "payout_settled": (
        "payout.settled",
        {"status": "settled", "rail": "ach", "bank_payout_id": "bp_1", "batch_id": "b1", "fee_minor": 25},
    ),
}


def event(object_id: str, kind: str = "charge") -> bytes:
    type_, fields = _EVENTS[kind]
    data = {
        "object": kind.split("_")[0],
        "request_id": object_id,
        "merchant_id": phase.TENANT,
        "amount_minor": AMOUNT_MINOR,
        "currency": "USD",
        **fields,
    }
    document = {
        "id": f"evt_{object_id}",
        "type": type_,
        "created_at": "2026-12-06T00:00:00Z",
        "sequence": 1,
        "data": data,
    }
    return json.dumps(document).encode()


def object_kind() -> str:
    """`--object`, taken off the command line (`_phase.main` reads the rest)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--object", choices=sorted(_EVENTS), default="charge")
    args, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    return str(args.object)


KIND = object_kind() if __name__ == "__main__" else "charge"


def needed() -> int:
    """An object a write: the warm-up's and every round's, as `_phase.run` makes them."""
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
    count, kind = needed(), KIND
    if kind == "refund":
        waiting = {path: deque(in_doubt_refunds(database, account, count)) for path in phase.PATHS}
    elif kind == "payout":
        waiting = {path: deque(in_doubt_payouts(database, account, count)) for path in phase.PATHS}
    elif kind == "payout_settled":
        waiting = {path: deque(in_doubt_payouts(database, account, count, Accepting())) for path in phase.PATHS}
    else:
        waiting = {path: deque(in_doubt_payment(database, account) for _ in range(count)) for path in phase.PATHS}
    print(f"{count} {kind} objects in doubt a path", flush=True)

    def reference(scope: KeyScope) -> Any:
        body = event(waiting["reference"].popleft(), kind)
        received = service.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "applied", received

    def data_plane(scope: KeyScope) -> Any:
        body = event(waiting["data plane"].popleft(), kind)
        received = receive.receive(database, SECRET, signing.sign(SECRET, now_us() // 1_000_000, body), body)
        assert received.result == "applied", received

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase(f"inbound_apply_{KIND}" if KIND != "charge" else "inbound_apply", "webhook", setup), __doc__)
