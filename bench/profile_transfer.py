#!/usr/bin/env python3
"""Where one ledger operation spends its time: one client, in this process, profiled.

The same operations as bench/ledger_bench.py (`raw-commit`, `engine-commit`, `spread`), run
--operations times in a loop on a fresh database, first unprofiled (wall and CPU time per
operation), then under a profiler:

    .venv/bin/python bench/profile_transfer.py --backend sqlite --scenario spread --operations 500
    .venv/bin/python bench/profile_transfer.py --backend postgres --profiler pyinstrument

`--profiler pyinstrument` needs `.venv/bin/pip install pyinstrument` (a local tool, not a
project dependency); the default is the standard library's cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common as common
import ledger_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--scenario", choices=("raw-commit", "engine-commit", "spread"), default="spread")
    parser.add_argument("--operations", type=int, default=300)
    parser.add_argument("--profiler", choices=("cprofile", "pyinstrument", "none"), default="cprofile")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--top", type=int, default=40, help="cProfile rows to print")
    parser.add_argument("--sort", default="cumulative", choices=["cumulative", "tottime"], help="cProfile order")
    args = parser.parse_args()

    from paycore.config import Settings
    from paycore.db.engine import Database

    workdir = Path(tempfile.mkdtemp(prefix="paycore-profile-"))
    target = ledger_bench._prepare_target(args.backend, workdir, args.postgres_url)
    database = Database(Settings(database_url=target.database_url, db_pool_size=2))
    try:
        source = destination = None
        if args.scenario == "spread":
            [(source, destination)] = ledger_bench._prepare_accounts(database, "spread", 1, "prof")
        spec = ledger_bench.ClientSpec(
            target.backend, target.database_url, target.libpq_url, target.sqlite_path,
            args.scenario, 0, "prof", 0.0, source, destination,
        )  # fmt: skip
        make = {
            "raw-commit": ledger_bench._raw_operation,
            "engine-commit": ledger_bench._engine_operation,
            "spread": ledger_bench._ledger_operation,
        }[args.scenario]
        operation, close, durability = make(spec)
        seq = 0
        for _ in range(min(50, args.operations)):  # warm caches and prepared statements
            operation(seq)
            seq += 1
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.operations):
            operation(seq)
            seq += 1
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"{args.backend} {args.scenario}: {durability}")
        print(
            f"unprofiled: {args.operations / wall:,.1f} ops/s, wall {1000 * wall / args.operations:.3f} ms/op,"
            f" CPU of this process {1000 * cpu / args.operations:.3f} ms/op (load average {common.load_average()})"
        )
        if args.profiler == "cprofile":
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.operations):
                operation(seq)
                seq += 1
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats(args.sort).print_stats(args.top)
            print(out.getvalue())
        elif args.profiler == "pyinstrument":
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
            for _ in range(args.operations):
                operation(seq)
                seq += 1
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False))
        close()
    finally:
        database.dispose()
        if target.postgres_name:
            common.drop_postgres_database(args.postgres_url, target.postgres_name)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
