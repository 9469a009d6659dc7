#!/usr/bin/env python3
"""A payment's accept alone (its first phase, without HTTP or the processor): the data plane
against the reference path, in one process, on one database, alternated in rounds (ADR 0026
step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/payments_accept_bench.py --backend sqlite --rounds 7 --count 1000

`reference`: `payments.service._start` in `Database.transaction` (SQLAlchemy Core, what every
payment's step 1 ran before migration 0027). `data plane`: `payments.accept.accept` (the
planner, then one call of `paycore_payments_accept` on PostgreSQL or the fixed list on SQLite).
Each round runs --count accepts of each, to one tenant's one destination, each with a fresh key.
"""

from __future__ import annotations

from typing import Any

import _phase as phase
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import accept, service
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment, Payment

TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=1_000, first_retry_ms=100)


def never() -> None:
    raise AssertionError("the data plane handed a bench payment to the reference path")


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
    new = NewPayment(1_000, "USD", "card", "tok_ok", destination, "bench", {"order": "1"}, actors.LOCAL)

    def reference(scope: KeyScope) -> Any:
        answer = database.transaction(
            lambda connection: service._start(connection, scope, new, TIMINGS, render_refusal)
        )
        assert isinstance(answer, Payment)

    def data_plane(scope: KeyScope) -> Any:
        answer = accept.accept(database, scope, new, processing_stale_ms=TIMINGS.processing_stale_ms, reference=never)
        assert isinstance(answer, Payment)

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("accept_phase", "accept", setup), __doc__)
