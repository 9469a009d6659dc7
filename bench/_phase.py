"""One data-plane phase alone (ADR 0026: no HTTP, no processor), the data plane against the
reference path, in one process, on one database, alternated in rounds: what
`payments_accept_bench.py` and `payouts_create_bench.py` share.

A `Phase` names its unit ("accept", "payout"), makes its fixture on a migrated database
(`setup`: the accounts, funded where it pays out) and returns its two writes, each taking a
fresh key's scope. Each round runs --count writes of each path, alternating which goes first.
Measured per write: this process's CPU (`time.process_time`: the planner, the driver, SQLite's
own work on SQLite), on PostgreSQL plus its backends' CPU (`/proc/<pid>/stat`), and the wall
time. Medians over rounds.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.idempotency.service import KeyScope
from paycore.kit.clock import now_us

TENANT = "bench"
PATHS = ("reference", "data plane")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_keys = itertools.count()

Write = Callable[[KeyScope], Any]  # one write under a fresh key; asserts its own success


@dataclass(frozen=True)
class Phase:
    name: str  # the scratch database's prefix, e.g. "accept_phase"
    unit: str  # what one write makes, e.g. "accept"
    setup: Callable[[Database], dict[str, Write]]  # the writes by path name (PATHS)


def key_scope() -> KeyScope:
    return KeyScope(TENANT, f"k{next(_keys)}", "f" * 64, now_us=now_us(), expires_at_us=None)


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


def measure(write: Write, count: int, postgres_name: str | None) -> tuple[float, float]:
    """(CPU µs a write, wall µs a write) of `count` writes one after another."""
    cpu_before, backends_before, wall_before = time.process_time(), backend_cpu_s(postgres_name), time.perf_counter()
    for _ in range(count):
        write(key_scope())
    cpu = time.process_time() - cpu_before + backend_cpu_s(postgres_name) - backends_before
    return cpu * 1e6 / count, (time.perf_counter() - wall_before) * 1e6 / count


def run(
    phase: Phase, database: Database, args: argparse.Namespace, postgres_name: str | None
) -> dict[str, list[float]]:
    paths = phase.setup(database)
    assert tuple(paths) == PATHS, tuple(paths)
    for write in paths.values():
        measure(write, args.count // 4, postgres_name)  # warm-up: caches, prepared statements
    found: dict[str, list[float]] = {f"{name} {unit}": [] for name in paths for unit in ("cpu", "wall")}
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for name in order:
            cpu_us, wall_us = measure(paths[name], args.count, postgres_name)
            found[f"{name} cpu"].append(cpu_us)
            found[f"{name} wall"].append(wall_us)
            print(f"round {number} {name}: {cpu_us:.0f} µs CPU, {wall_us:.0f} µs wall a {phase.unit}", flush=True)
    return found


def main(phase: Phase, doc: str | None) -> None:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=1000, help=f"{phase.unit}s per path per round")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    postgres_name = None
    with tempfile.TemporaryDirectory(prefix=f"{phase.name}-") as scratch:
        if args.backend == "postgres":
            postgres_name = common.new_postgres_database(args.postgres_url, phase.name)
            url = common.postgres_database_url(args.postgres_url, postgres_name)
        else:
            url = f"sqlite:///{Path(scratch) / 'phase.db'}"
        database = Database(Settings(database_url=url, db_pool_size=2))
        try:
            migrate.upgrade(database)
            found = run(phase, database, args, postgres_name)
        finally:
            database.dispose()
            if postgres_name is not None:
                common.drop_postgres_database(args.postgres_url, postgres_name)
    medians = {name: statistics.median(values) for name, values in found.items()}
    unit = phase.unit
    print(f"\n{args.backend}, {args.rounds} rounds of {args.count} {unit}s a path")
    print(f"| path | CPU µs a {unit} (median) | wall µs a {unit} (median) |")
    print("|---|---|---|")
    for name in PATHS:
        print(f"| {name} | {medians[f'{name} cpu']:.0f} | {medians[f'{name} wall']:.0f} |")
    cpu_ratio = medians["data plane cpu"] / medians["reference cpu"]
    wall_ratio = medians["data plane wall"] / medians["reference wall"]
    print(f"| data plane / reference | {cpu_ratio:.2f}x | {wall_ratio:.2f}x |")
