#!/usr/bin/env python3
"""A credit's write phase alone, without HTTP: the data plane against the reference path, in
one process, on one database, alternated in rounds (ADR 0026, issue 39).

    .venv/bin/python bench/credits_create_bench.py --backend sqlite --rounds 7 --credits 2000

`reference`: `idempotency.run_async` around `credits.service.create_credit` (SQLAlchemy Core,
what every credit ran before migration 0026). `data plane`: `credits.create.create_credit` (the
planner, then one call of `paycore_credits_create` on PostgreSQL or the fixed list on SQLite).
Each round runs --credits credits of each, alternating which goes first, to one tenant, each
with a fresh key. Measured per credit: this process's CPU (`time.process_time`: the planner,
the driver, SQLite's own work on SQLite), on PostgreSQL plus its backends' CPU
(`/proc/<pid>/stat`), and the wall time. Medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import _common as common
from paycore.config import Settings
from paycore.credits import create, schemas, service
from paycore.credits.plan import Credit, CreditLine
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us

TENANT = "bench"
USD = frozenset({"USD"})
LINES = (CreditLine("bench", 1, "USD"),)
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_keys = itertools.count()

Write = Callable[[Database, idempotency.KeyScope], Coroutine[Any, Any, tuple[idempotency.Outcome, bool]]]


def render(credit: Credit) -> str:
    return dumps(schemas.credit_json(credit))


def key_scope() -> idempotency.KeyScope:
    return idempotency.KeyScope(TENANT, f"k{next(_keys)}", "f" * 64, now_us=now_us(), expires_at_us=None)


async def data_plane(database: Database, scope: idempotency.KeyScope) -> tuple[idempotency.Outcome, bool]:
    return await create.create_credit(
        database, scope, LINES, enabled_currencies=USD, lines_max=10, render=render, render_refusal=render_refusal
    )


async def reference(database: Database, scope: idempotency.KeyScope) -> tuple[idempotency.Outcome, bool]:
    def effect(connection: Any) -> idempotency.Outcome:
        credit = service.create_credit(
            connection,
            scope.tenant_id,
            idempotency_key=scope.key,
            lines=LINES,
            enabled_currencies=USD,
            lines_max=10,
            now_us=scope.now_us,
        )
        return idempotency.Outcome(201, render(credit))

    return await idempotency.run_async(database, scope, effect, render_refusal)


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


async def measure(database: Database, write: Write, count: int, postgres_name: str | None) -> tuple[float, float]:
    """(CPU µs a credit, wall µs a credit) of `count` credits written one after another."""
    cpu_before, backends_before, wall_before = time.process_time(), backend_cpu_s(postgres_name), time.perf_counter()
    for _ in range(count):
        outcome, replayed = await write(database, key_scope())
        assert outcome.status == 201 and not replayed, outcome
    cpu = time.process_time() - cpu_before + backend_cpu_s(postgres_name) - backends_before
    return cpu * 1e6 / count, (time.perf_counter() - wall_before) * 1e6 / count


async def run(database: Database, args: argparse.Namespace, postgres_name: str | None) -> dict[str, list[float]]:
    paths: dict[str, Write] = {"reference": reference, "data plane": data_plane}
    for write in paths.values():
        await measure(database, write, args.credits // 4, postgres_name)  # warm-up: caches, prepared statements
    found: dict[str, list[float]] = {f"{name} {unit}": [] for name in paths for unit in ("cpu", "wall")}
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for name in order:
            cpu_us, wall_us = await measure(database, paths[name], args.credits, postgres_name)
            found[f"{name} cpu"].append(cpu_us)
            found[f"{name} wall"].append(wall_us)
            print(f"round {number} {name}: {cpu_us:.0f} µs CPU, {wall_us:.0f} µs wall a credit", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--credits", type=int, default=2000, help="credits per path per round")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    postgres_name = None
    with tempfile.TemporaryDirectory(prefix="credits-phase-") as scratch:
        if args.backend == "postgres":
            postgres_name = common.new_postgres_database(args.postgres_url, "credits_phase")
            url = common.postgres_database_url(args.postgres_url, postgres_name)
        else:
            url = f"sqlite:///{Path(scratch) / 'phase.db'}"
        database = Database(Settings(database_url=url, db_pool_size=2))
        try:
            migrate.upgrade(database)
            found = asyncio.run(run(database, args, postgres_name))
        finally:
            database.dispose()
            if postgres_name is not None:
                common.drop_postgres_database(args.postgres_url, postgres_name)
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(f"\n{args.backend}, {args.rounds} rounds of {args.credits} credits a path")
    print("| path | CPU µs a credit (median) | wall µs a credit (median) |")
    print("|---|---|---|")
    for name in ("reference", "data plane"):
        print(f"| {name} | {medians[f'{name} cpu']:.0f} | {medians[f'{name} wall']:.0f} |")
    cpu_ratio = medians["data plane cpu"] / medians["reference cpu"]
    wall_ratio = medians["data plane wall"] / medians["reference wall"]
    print(f"| data plane / reference | {cpu_ratio:.2f}x | {wall_ratio:.2f}x |")


if __name__ == "__main__":
    main()
