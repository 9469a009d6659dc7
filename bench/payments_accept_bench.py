#!/usr/bin/env python3
"""A payment's accept alone (its first phase, without HTTP or the processor): the data plane
against the reference path, in one process, on one database, alternated in rounds (ADR 0026
step 3, issue 39; the harness is `_phase.py`, shared with `refunds_create_bench.py`).

    .venv/bin/python bench/payments_accept_bench.py --backend sqlite --rounds 7 --payments 1000

`reference`: `payments.service._start` in `Database.transaction` (SQLAlchemy Core, what every
payment's step 1 ran before migration 0027). `data plane`: `payments.accept.accept` (the
planner, then one call of `paycore_payments_accept` on PostgreSQL or the fixed list on SQLite).
Each round runs --payments accepts of each, alternating which goes first, to one tenant's one
destination, each with a fresh key. Measured per accept: this process's CPU (with PostgreSQL's
backends') and the wall time. Medians over rounds.
"""

from __future__ import annotations

import itertools

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

TENANT = "bench"
TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=1_000, first_retry_ms=100)
_keys = itertools.count()


def key_scope() -> KeyScope:
    return KeyScope(TENANT, f"k{next(_keys)}", "f" * 64, now_us=now_us(), expires_at_us=None)


def never() -> None:
    raise AssertionError("the data plane handed a bench payment to the reference path")


def paths(database: Database, new: NewPayment) -> dict[str, phase.Write]:
    def reference() -> None:
        scope = key_scope()
        answer = database.transaction(
            lambda connection: service._start(connection, scope, new, TIMINGS, render_refusal)
        )
        assert isinstance(answer, Payment)

    def data_plane() -> None:
        answer = accept.accept(
            database, key_scope(), new, processing_stale_ms=TIMINGS.processing_stale_ms, reference=never
        )
        assert isinstance(answer, Payment)

    return {"reference": reference, "data plane": data_plane}


def main() -> None:
    args = phase.arguments(__doc__ or "", "accept", "--payments")
    with phase.migrated(args, "accept_phase") as (database, postgres_name):
        destination = database.transaction(
            lambda connection: ledger.create_account(
                connection,
                TENANT,
                code="merchant.main",
                currency="USD",
                normal_balance="credit",
                no_overdraft=False,
                metadata={},
                now_us=now_us(),
            )
        ).id
        new = NewPayment(1_000, "USD", "card", "tok_ok", destination, "bench", {"order": "1"}, actors.LOCAL)
        found = phase.alternate(paths(database, new), args, postgres_name, "accept")
    phase.report(found, args, "accept")


if __name__ == "__main__":
    main()
