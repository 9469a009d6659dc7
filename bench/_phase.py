"""What the data plane's phase benches share (ADR 0026, issue 39): one phase alone, without
HTTP, the data plane against the reference path, in one process, on one database, alternated in
rounds. Measured per write: this process's CPU (`time.process_time`: the planner, the driver,
SQLite's own work on SQLite), on PostgreSQL plus its backends' CPU (`/proc/<pid>/stat`), and
the wall time. Medians over rounds. Used by `payments_accept_bench.py` and
`refunds_create_bench.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database

PATHS = ("reference", "data plane")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

Write = Callable[[], Any]  # one write of the phase, checked by the caller's function


def arguments(description: str, unit: str, count_flag: str) -> argparse.Namespace:
    """The benches' options; `count_flag` names the writes per path per round (`--payments`)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(count_flag, dest="count", type=int, default=1000, help=f"{unit}s per path per round")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    return parser.parse_args()


@contextmanager
def migrated(args: argparse.Namespace, name: str) -> Iterator[tuple[Database, str | None]]:
    """A fresh database at head: (it, its PostgreSQL name or None), dropped after."""
    postgres_name = None
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as scratch:
        if args.backend == "postgres":
            postgres_name = common.new_postgres_database(args.postgres_url, name)
            url = common.postgres_database_url(args.postgres_url, postgres_name)
        else:
            url = f"sqlite:///{Path(scratch) / 'phase.db'}"
        database = Database(Settings(database_url=url, db_pool_size=2))
        try:
            migrate.upgrade(database)
            yield database, postgres_name
        finally:
            database.dispose()
            if postgres_name is not None:
                common.drop_postgres_database(args.postgres_url, postgres_name)


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
        write()
    cpu = time.process_time() - cpu_before + backend_cpu_s(postgres_name) - backends_before
    return cpu * 1e6 / count, (time.perf_counter() - wall_before) * 1e6 / count


def alternate(
    paths: dict[str, Write], args: argparse.Namespace, postgres_name: str | None, unit: str
) -> dict[str, list[float]]:
    """Each path's CPU and wall time a write, per round, alternating which goes first."""
    assert tuple(paths) == PATHS, paths
    for write in paths.values():
        measure(write, args.count // 4, postgres_name)  # warm-up: caches, prepared statements
    found: dict[str, list[float]] = {f"{name} {what}": [] for name in paths for what in ("cpu", "wall")}
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for name in order:
            cpu_us, wall_us = measure(paths[name], args.count, postgres_name)
            found[f"{name} cpu"].append(cpu_us)
            found[f"{name} wall"].append(wall_us)
            print(f"round {number} {name}: {cpu_us:.0f} µs CPU, {wall_us:.0f} µs wall {_a(unit)}", flush=True)
    return found


def report(found: dict[str, list[float]], args: argparse.Namespace, unit: str) -> None:
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(f"\n{args.backend}, {args.rounds} rounds of {args.count} {unit}s a path")
    print(f"| path | CPU µs {_a(unit)} (median) | wall µs {_a(unit)} (median) |")
    print("|---|---|---|")
    for name in PATHS:
        print(f"| {name} | {medians[f'{name} cpu']:.0f} | {medians[f'{name} wall']:.0f} |")
    cpu_ratio = medians["data plane cpu"] / medians["reference cpu"]
    wall_ratio = medians["data plane wall"] / medians["reference wall"]
    print(f"| data plane / reference | {cpu_ratio:.2f}x | {wall_ratio:.2f}x |")


def _a(unit: str) -> str:
    return f"an {unit}" if unit[0] in "aeiou" else f"a {unit}"
