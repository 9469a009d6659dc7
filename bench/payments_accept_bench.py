#!/usr/bin/env python3
"""A payment's accept alone (its first phase, without HTTP or the processor): the data plane
against the reference path, in one process, on one database, alternated in rounds (ADR 0026
step 3, issue 39).

    .venv/bin/python bench/payments_accept_bench.py --backend sqlite --rounds 7 --payments 1000

`reference`: `payments.service._start` in `Database.transaction` (SQLAlchemy Core, what every
payment's step 1 ran before migration 0027). `data plane`: `payments.accept.accept` (the
planner, then one call of `paycore_payments_accept` on PostgreSQL or the fixed list on SQLite).
Each round runs --payments accepts of each, alternating which goes first, to one tenant's one
destination, each with a fresh key. Measured per accept: this process's CPU
(`time.process_time`: the planner, the driver, SQLite's own work on SQLite), on PostgreSQL
plus its backends' CPU (`/proc/<pid>/stat`), and the wall time. Medians over rounds.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common
from paycore.config import Settings
from paycore.db import migrate
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
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_keys = itertools.count()

Write = Callable[[Database, KeyScope, NewPayment], Any]


def key_scope() -> KeyScope:
    return KeyScope(TENANT, f"k{next(_keys)}", "f" * 64, now_us=now_us(), expires_at_us=None)


def never() -> None:
    raise AssertionError("the data plane handed a bench payment to the reference path")


def data_plane(database: Database, scope: KeyScope, new: NewPayment) -> Any:
    return accept.accept(database, scope, new, processing_stale_ms=TIMINGS.processing_stale_ms, reference=never)


def reference(database: Database, scope: KeyScope, new: NewPayment) -> Any:
    return database.transaction(lambda connection: service._start(connection, scope, new, TIMINGS, render_refusal))


def backend_cpu_s(name: str | None) -> float:
    if name is None:
        return 0.0
    total = 0
    for pid in common.postgres_backends(name):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS_PER_S


def measure(
    database: Database, write: Write, new: NewPayment, count: int, postgres_name: str | None
) -> tuple[float, float]:
    """(CPU µs an accept, wall µs an accept) of `count` accepts written one after another."""
    cpu_before, backends_before, wall_before = time.process_time(), backend_cpu_s(postgres_name), time.perf_counter()
    for _ in range(count):
        assert isinstance(write(database, key_scope(), new), Payment)
    cpu = time.process_time() - cpu_before + backend_cpu_s(postgres_name) - backends_before
    return cpu * 1e6 / count, (time.perf_counter() - wall_before) * 1e6 / count


def run(database: Database, args: argparse.Namespace, postgres_name: str | None) -> dict[str, list[float]]:
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
    paths: dict[str, Write] = {"reference": reference, "data plane": data_plane}
    for write in paths.values():
        measure(database, write, new, args.payments // 4, postgres_name)  # warm-up: caches, prepared statements
    found: dict[str, list[float]] = {f"{name} {unit}": [] for name in paths for unit in ("cpu", "wall")}
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for name in order:
            cpu_us, wall_us = measure(database, paths[name], new, args.payments, postgres_name)
            found[f"{name} cpu"].append(cpu_us)
            found[f"{name} wall"].append(wall_us)
            print(f"round {number} {name}: {cpu_us:.0f} µs CPU, {wall_us:.0f} µs wall an accept", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--payments", type=int, default=1000, help="accepts per path per round")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    postgres_name = None
    with tempfile.TemporaryDirectory(prefix="accept-phase-") as scratch:
        if args.backend == "postgres":
            postgres_name = common.new_postgres_database(args.postgres_url, "accept_phase")
            url = common.postgres_database_url(args.postgres_url, postgres_name)
        else:
            url = f"sqlite:///{Path(scratch) / 'phase.db'}"
        database = Database(Settings(database_url=url, db_pool_size=2))
        try:
            migrate.upgrade(database)
            found = run(database, args, postgres_name)
        finally:
            database.dispose()
            if postgres_name is not None:
                common.drop_postgres_database(args.postgres_url, postgres_name)
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(f"\n{args.backend}, {args.rounds} rounds of {args.payments} accepts a path")
    print("| path | CPU µs an accept (median) | wall µs an accept (median) |")
    print("|---|---|---|")
    for name in ("reference", "data plane"):
        print(f"| {name} | {medians[f'{name} cpu']:.0f} | {medians[f'{name} wall']:.0f} |")
    cpu_ratio = medians["data plane cpu"] / medians["reference cpu"]
    wall_ratio = medians["data plane wall"] / medians["reference wall"]
    print(f"| data plane / reference | {cpu_ratio:.2f}x | {wall_ratio:.2f}x |")


if __name__ == "__main__":
    main()
