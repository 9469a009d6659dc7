#!/usr/bin/env python3
"""A capture's two phases alone (begin and finish, without HTTP; the processor a stand-in that
answers at once): the data plane against the reference path, in one process, on one database,
alternated in rounds (ADR 0026 step 3, ADR 0029; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/payments_capture_bench.py --backend sqlite --rounds 7 --count 1000

Before the rounds (not measured), enough authorizations of 1000 are made for every write of both
paths (accept and settle to `requires_capture`, on the data plane). Each write captures 600 of
one, under a fresh key: `reference` runs `operations._begin` and `_finish` each in
`Database.transaction` (SQLAlchemy Core, what every capture ran before); `data plane` runs
`capture.begin` and `capture.finish` (the planners, then one call each of
`paycore_payments_capture_begin` and `_finish` on PostgreSQL, or the fixed lists on SQLite).
Both send the capture to the stand-in with `processor_calls.send_operation` between the phases.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from typing import Any, cast

import _phase as phase
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import accept, capture, operations, processor_calls, settle, states
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import CaptureRequest, ChargeRequest, ChargeResult, Processor

TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=1_000, first_retry_ms=100)
AMOUNT_MINOR, CAPTURED_MINOR = 1_000, 600
EXPIRES_US = 7 * 24 * 3600 * 1_000_000


class Answering:
    """The processor's stand-in: authorizes and captures at once."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(
            request.request_id,
            "requires_capture",
            f"ch_{request.request_id}",
            request.amount_minor,
            "USD",
            capture="manual",
            amount_capturable_minor=request.amount_minor,
            amount_captured_minor=0,
            amount_released_minor=0,
            authorization_expires_at_us=now_us() + EXPIRES_US,
        )

    def capture(self, request: CaptureRequest) -> ChargeResult:
        charge_id = request.payment_reference
        return ChargeResult(
            charge_id.removeprefix("ch_"),
            "captured",
            charge_id,
            AMOUNT_MINOR,
            "USD",
            capture="manual",
            amount_capturable_minor=0,
            amount_captured_minor=request.amount_minor,
            amount_released_minor=AMOUNT_MINOR - request.amount_minor,
            authorization_expires_at_us=None,
        )


def _writes_needed() -> int:
    """Every write of one path over the run: the warm-up and the rounds (`_phase.main`'s args)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=1000)
    args, _ = parser.parse_known_args()
    return int(args.count // 4 + args.rounds * args.count)


def _authorizations(database: Database, processor: Processor, destination: str, count: int) -> list[str]:
    """The ids of `count` authorizations, made on the data plane (not measured)."""
    new = NewPayment(AMOUNT_MINOR, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL, "manual")
    made = []
    for _ in range(count):
        started = accept.accept(database, phase.key_scope(), new, processing_stale_ms=60_000, reference=_never)
        assert isinstance(started, Payment)
        answer = settle.settle(database, started, processor_calls.charge(processor, started), actor=actors.LOCAL)
        assert answer is not None and answer.status == 201, answer
        made.append(started.id)
    return made


def _never() -> Any:
    raise AssertionError("the data plane handed a bench request to the reference path")


def setup(database: Database) -> dict[str, phase.Write]:
    destination = database.transaction(
        lambda connection: ledger.create_account(
            connection,
            phase.TENANT,
            code="merchant.main",
            currency="USD",
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
    ).id
    processor = cast(Processor, Answering())
    count = _writes_needed()
    ids = {name: iter(_authorizations(database, processor, destination, count)) for name in phase.PATHS}
    keys = itertools.count()

    def reference(scope: KeyScope) -> Any:
        payment_id, scope = next(ids["reference"]), _fresh(scope, keys)
        started = database.transaction(
            lambda connection: operations._begin(
                connection, scope, payment_id, states.CAPTURE, CAPTURED_MINOR, actors.LOCAL, TIMINGS, render_refusal
            )
        )
        assert isinstance(started, Payment)
        call = processor_calls.send_operation(processor, started)
        answer = database.transaction(
            lambda connection: operations._finish(connection, scope, started, call, actors.LOCAL, 100)
        )
        assert isinstance(answer, Outcome) and answer.status == 200, answer

    def data_plane(scope: KeyScope) -> Any:
        payment_id, scope = next(ids["data plane"]), _fresh(scope, keys)
        started = capture.begin(
            database, scope, payment_id, states.CAPTURE, CAPTURED_MINOR, actor=actors.LOCAL, stale_ms=60_000
        )
        assert isinstance(started, Payment)
        answer = capture.finish(
            database, started, processor_calls.send_operation(processor, started), actor=actors.LOCAL
        )
        assert answer is not None and answer.status == 200, answer

    return {"reference": reference, "data plane": data_plane}


def _fresh(scope: KeyScope, keys: Iterator[int]) -> KeyScope:
    """The capture's own key (the scope's clock and tenant): never an authorization's."""
    return KeyScope(scope.tenant_id, f"capture-{next(keys)}", scope.request_fingerprint, scope.now_us, None)


if __name__ == "__main__":
    phase.main(phase.Phase("capture_phase", "capture", setup), __doc__)
