#!/usr/bin/env python3
"""Where a `ledger.create_batch` spends its time on PostgreSQL: one client, in this process.

For each batch size, --repeats batches of two-entry transfers between two accounts (as
bench/targets.py's batch rows), each in its own transaction, and per batch: the wall time,
this process's CPU time, the wall time of the one `paycore_create_batch` statement, the
server's own time in the function (`pg_stat_xact_user_functions`, `track_functions = 'pl'`, read
before and after it in the batch's transaction), and the rest of the transaction (begin and
commit: the wall time outside `create_batch`), medians printed:

    .venv/bin/python bench/profile_batch.py --sizes 100,8000 --repeats 5

`--switched-off balanced,system,checks` measures, alternated with the batch as it is, what each
per-row check costs: each named one switched off inside the batch's transaction alone (a
measurement on a scratch database, never a deployment): `balanced` the deferred trigger that
checks each entry's transfer balances (migration 0001), `system` the BEFORE trigger that reads
each entry's account (migration 0024), `checks` every trigger and foreign-key check at once
(`session_replication_role = replica`).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
import ledger_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,8000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--switched-off", default="", help="balanced, system, checks: see above")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()

    from paycore.config import Settings
    from paycore.db.engine import Database
    from paycore.ledger import batch_repository
    from paycore.ledger import service as ledger

    workdir = Path(tempfile.mkdtemp(prefix="paycore-profile-batch-"))
    target = ledger_bench._prepare_target("postgres", workdir, args.postgres_url)
    database = Database(Settings(database_url=target.database_url, db_pool_size=2))
    call_s: list[float] = []
    original = batch_repository.create_batch_call

    def timed_call(connection: Any, params: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(connection, params)
        finally:
            call_s.append(time.perf_counter() - started)

    batch_repository.create_batch_call = timed_call  # type: ignore[assignment]
    try:
        [(source, destination)] = ledger_bench._prepare_accounts(database, "spread", 1, "profile-batch")
        entries = (
            ledger.EntrySpec(source, "debit", ledger_bench.AMOUNT_MINOR),
            ledger.EntrySpec(destination, "credit", ledger_bench.AMOUNT_MINOR),
        )
        print(f"load average {common.load_average()}")
        variants = ["as is", *[name for name in args.switched_off.split(",") if name]]
        assert all(name in _SWITCHED_OFF for name in variants[1:]), variants
        for size in [int(value) for value in args.sizes.split(",")]:
            specs = [ledger.TransferSpec(entries, currency=ledger_bench.CURRENCY)] * size
            found: dict[str, dict[str, list[float]]] = {
                v: {"wall": [], "cpu": [], "call": [], "server": [], "inside": []} for v in variants
            }
            _batch(database, specs, "as is", {name: [] for name in found["as is"]})  # warm
            for number in range(args.repeats):
                for variant in variants if number % 2 == 0 else reversed(variants):
                    call_s.clear()
                    _batch(database, specs, variant, found[variant])
                    found[variant]["call"].append(call_s[0])
            for variant in variants:
                ms = {name: 1000 * statistics.median(values) for name, values in found[variant].items()}
                print(
                    f"batch {size:>6,} ({variant}): {size / (ms['wall'] / 1000):>9,.0f} transfers/s; per batch (median"
                    f" of {args.repeats}) wall {ms['wall']:.1f} ms, this process's CPU {ms['cpu']:.1f} ms, the call"
                    f" {ms['call']:.1f} ms of which the server's function {ms['server']:.1f} ms; begin and commit"
                    f" {ms['wall'] - ms['inside']:.1f} ms"
                )
    finally:
        batch_repository.create_batch_call = original  # type: ignore[assignment]
        database.dispose()
        if target.postgres_name:
            common.drop_postgres_database(args.postgres_url, target.postgres_name)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


# What `--switched-off` runs first in a batch's transaction, and after it before the commit.
_SWITCHED_OFF = {
    "as is": ((), ()),
    "balanced": (
        ("ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_balanced",),
        ("ALTER TABLE ledger_entries ENABLE TRIGGER ledger_entries_balanced",),
    ),
    "system": (
        ("ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_system_account",),
        # The deferred balance checks run first, as at the commit: the table must have none pending.
        (
            "SET CONSTRAINTS ledger_entries_balanced IMMEDIATE",
            "ALTER TABLE ledger_entries ENABLE TRIGGER ledger_entries_system_account",
        ),
    ),
    "checks": (("SET LOCAL session_replication_role = replica",), ()),
}


def _batch(database: Any, specs: Any, variant: str, found: dict[str, list[float]]) -> None:
    """One batch in its own transaction, `variant`'s checks switched off in it; its figures."""
    from sqlalchemy import text

    from paycore.kit.clock import now_us
    from paycore.ledger import service as ledger

    before_sql, after_sql = _SWITCHED_OFF[variant]

    def one(connection: Any) -> None:
        connection.execute(text("SET LOCAL track_functions = 'pl'"))
        for sql in before_sql:
            connection.execute(text(sql))
        before_ms = _function_ms(connection)  # the view also holds earlier transactions not yet flushed
        started = time.perf_counter()
        ledger.create_batch(connection, ledger_bench.TENANT, specs, now_us=now_us(), idempotency_key=None)
        found["inside"].append(time.perf_counter() - started)
        found["server"].append((_function_ms(connection) - before_ms) / 1000)
        for sql in after_sql:
            connection.execute(text(sql))

    wall, cpu = time.perf_counter(), time.process_time()
    database.transaction(one)
    found["wall"].append(time.perf_counter() - wall)
    found["cpu"].append(time.process_time() - cpu)


def _function_ms(connection: Any) -> float:
    from sqlalchemy import text

    found = connection.execute(
        text("SELECT total_time FROM pg_stat_xact_user_functions WHERE funcname = 'paycore_create_batch'")
    ).scalar_one_or_none()
    return 0.0 if found is None else float(found)


if __name__ == "__main__":
    sys.exit(main())
