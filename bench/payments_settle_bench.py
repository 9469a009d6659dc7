#!/usr/bin/env python3
"""A payment's settle write alone, without HTTP or the processor: the data plane against the
reference path, in one process, on one database, alternated in rounds (ADR 0026 step 3).

    .venv/bin/python bench/payments_settle_bench.py --backend sqlite --rounds 7 --payments 1000

Before each measured batch, --payments payments are accepted (step 1, `service._start`, not
measured) and each gets the processor's `succeeded` answer as a `Call` (as `processor_calls.charge` makes
it, from a stand-in that answers at once). Then the batch is settled, one payment after another,
by one path: `reference` (`service.finish` in `Database.transaction`: the payment's lifecycle
through SQLAlchemy Core, what every payment ran before step 3) or `data plane` (`settle.settle`:
the planner, then one call of `paycore_payments_settle` on PostgreSQL or the fixed list on
SQLite). `--declined-authorization`: each payment is an authorization (`capture: "manual"`)
that the stand-in declines, naming the lifetime it would have had (migration 0039: the settle
writes it, the hold voided, 402). Rounds alternate which path goes first. Measured per write: this process's CPU
(`time.process_time`: the planner, the driver, SQLite's own work on SQLite), on PostgreSQL plus
its backends' CPU (`/proc/<pid>/stat`), and the wall time. Medians over rounds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import _common as common
from credits_create_bench import backend_cpu_s
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.calls import Call
from paycore.payments import processor_calls, service, settle
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import ChargeRequest, ChargeResult, Processor

TENANT = "bench"
DECLINED_AUTHORIZATION = {"on": False}  # --declined-authorization, set once by main
AUTHORIZATION_LIFETIME_US = 7 * 24 * 3_600_000_000
TIMINGS = service.PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=1_000)
_keys = itertools.count()

Accepted = tuple[KeyScope, Payment, Call[ChargeResult]]
Settle = Callable[[Database, Accepted], Outcome | None]


class Answering:
    """The processor's stand-in: `succeeded` at once."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, "USD")


class Declining:
    """The processor's stand-in for an authorization: declined at once, naming its lifetime."""

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(
            request.request_id,
            "failed",
            f"ch_{request.request_id}",
            request.amount_minor,
            "USD",
            failure_code="card_declined",
            capture="manual",
            authorization_expires_at_us=now_us() + AUTHORIZATION_LIFETIME_US,
        )


def reference(database: Database, accepted: Accepted) -> Outcome | None:
    scope, payment, call = accepted
    return database.transaction(
        lambda connection: service.finish(
            connection, scope, payment, call, actor=actors.LOCAL, first_retry_ms=TIMINGS.first_retry_ms
        )
    )


def data_plane(database: Database, accepted: Accepted) -> Outcome | None:
    _, payment, call = accepted
    return settle.settle(database, payment, call, actor=actors.LOCAL)


def accept(database: Database, destination: str, count: int) -> list[Accepted]:
    """`count` payments after step 1 (not measured), each with its call's answer."""
    declined = DECLINED_AUTHORIZATION["on"]
    processor = cast(Processor, Declining() if declined else Answering())
    found = []
    for _ in range(count):
        new = NewPayment(
            100,
            "USD",
            "card",
            "tok_ok",
            destination,
            None,
            {},
            actors.LOCAL,
            capture="manual" if declined else "automatic",
        )
        scope = KeyScope(TENANT, f"k{next(_keys)}", "f" * 64, now_us(), None)
        payment = database.transaction(
            lambda connection, scope=scope, new=new: service._start(connection, scope, new, TIMINGS, render_refusal)
        )
        assert isinstance(payment, Payment)
        found.append((scope, payment, processor_calls.charge(processor, payment)))
    return found


def measure(database: Database, path: Settle, batch: list[Accepted], postgres: str | None) -> tuple[float, float]:
    """(CPU µs a write, wall µs a write) of the batch settled one after another."""
    cpu_before, backends_before, wall_before = time.process_time(), backend_cpu_s(postgres), time.perf_counter()
    for accepted in batch:
        answer = path(database, accepted)
        assert answer is not None and answer.status == (402 if DECLINED_AUTHORIZATION["on"] else 201), answer
    cpu = time.process_time() - cpu_before + backend_cpu_s(postgres) - backends_before
    return cpu * 1e6 / len(batch), (time.perf_counter() - wall_before) * 1e6 / len(batch)


def run(database: Database, args: argparse.Namespace, postgres: str | None) -> dict[str, list[float]]:
    destination = database.transaction(
        lambda connection: (
            ledger.create_account(
                connection,
                TENANT,
                code="merchant.bench",
                currency="USD",
                normal_balance="credit",
                no_overdraft=False,
                metadata={},
                now_us=now_us(),
            ).id
        )
    )
    paths: dict[str, Settle] = {"reference": reference, "data plane": data_plane}
    for path in paths.values():  # warm-up: caches, prepared statements
        measure(database, path, accept(database, destination, args.payments // 4), postgres)
    found: dict[str, list[float]] = {f"{name} {unit}": [] for name in paths for unit in ("cpu", "wall")}
    for number in range(args.rounds):
        for name in list(paths) if number % 2 == 0 else list(reversed(paths)):
            cpu_us, wall_us = measure(database, paths[name], accept(database, destination, args.payments), postgres)
            found[f"{name} cpu"].append(cpu_us)
            found[f"{name} wall"].append(wall_us)
            print(f"round {number} {name}: {cpu_us:.0f} µs CPU, {wall_us:.0f} µs wall a settle", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--payments", type=int, default=1000, help="payments per path per round")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--declined-authorization", action="store_true")
    args = parser.parse_args()
    DECLINED_AUTHORIZATION["on"] = args.declined_authorization
    postgres = None
    with tempfile.TemporaryDirectory(prefix="settle-phase-") as scratch:
        if args.backend == "postgres":
            postgres = common.new_postgres_database(args.postgres_url, "settle_phase")
            url = common.postgres_database_url(args.postgres_url, postgres)
        else:
            url = f"sqlite:///{Path(scratch) / 'phase.db'}"
        database = Database(Settings(database_url=url, db_pool_size=2))
        try:
            migrate.upgrade(database)
            found = run(database, args, postgres)
        finally:
            database.dispose()
            if postgres is not None:
                common.drop_postgres_database(args.postgres_url, postgres)
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(f"\n{args.backend}, {args.rounds} rounds of {args.payments} settles a path")
    print("| path | CPU µs a settle (median) | wall µs a settle (median) |")
    print("|---|---|---|")
    for name in ("reference", "data plane"):
        print(f"| {name} | {medians[f'{name} cpu']:.0f} | {medians[f'{name} wall']:.0f} |")
    cpu_ratio = medians["data plane cpu"] / medians["reference cpu"]
    wall_ratio = medians["data plane wall"] / medians["reference wall"]
    print(f"| data plane / reference | {cpu_ratio:.2f}x | {wall_ratio:.2f}x |")


if __name__ == "__main__":
    main()
