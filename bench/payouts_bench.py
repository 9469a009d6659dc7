"""Payouts/s through the whole state machine (issue 5), with 1 and 2 worker processes, on
PostgreSQL.

    .venv/bin/python bench/payouts_bench.py [--payouts 1000] [--workers 1,2] [--repeat 3]

Each run gets a database of its own, a funded source account and `--payouts` payouts
scheduled for today (through `paycore.payouts.service.schedule`, as the API does, before the
clock starts). Then real processes: the sandbox (`paycore processor serve`, bank rail
included, its webhooks to a `paycore serve` API process) and W `paycore worker`s. The clock
runs from the workers' start until every payout is `sent` (the workers' own work: queue,
claim, send, record) and until every payout is `settled` (the sandbox bank settles a batch
about 1.5 s after it closes; the webhooks or the resolver bring the news). Checked after each
run: one payout at the bank per payout, the source debited exactly once per payout, and
`paycore ledger verify` passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sqlalchemy import func, select

import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify
from paycore.payouts import service as payouts
from paycore.payouts import states
from paycore.payouts.models import payouts as payouts_table
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary

TENANT = "bench"
AMOUNT_MINOR = 100
RUN_TIMEOUT_S = 120
PAYCORE = [str(Path(sys.executable).parent / "paycore")]  # the installed entry point of this venv


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def setup(database: Database, count: int) -> tuple[str, list[str]]:
    beneficiary = Beneficiary("Bench", routing_number="110000000", account_number="000123456789")

    def work(connection: Any) -> tuple[str, list[str]]:
        now = now_us()
        source, funding = (
            ledger.create_account(
                connection,
                TENANT,
                code=code,
                currency="USD",
                normal_balance=normal,
                no_overdraft=False,
                metadata={},
                now_us=now,
            ).id
            for code, normal in (("seller", "credit"), ("funding", "debit"))
        )
        total = count * AMOUNT_MINOR
        spec = TransferSpec(entries=(EntrySpec(funding, "debit", total), EntrySpec(source, "credit", total)))
        ledger.create_transfer(connection, TENANT, spec, now_us=now)
        new = NewPayout(AMOUNT_MINOR, "USD", source, "ach", beneficiary)
        return source, [payouts.schedule(connection, TENANT, new, actor="local", now_us=now).id for _ in range(count)]

    return database.transaction(work)


def counts(database: Database) -> dict[str, int]:
    query = select(payouts_table.c.status, func.count()).group_by(payouts_table.c.status)
    with database.read() as connection:
        return {states.public(status): int(found) for status, found in connection.execute(query)}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen([*PAYCORE, *args], env=env, stdout=handle, stderr=subprocess.STDOUT)


def wait_ready(port: int, path: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing answered on port {port}{path}")


def run_once(admin_url: str, count: int, workers: int, scratch: Path) -> dict[str, Any]:
    name = common.new_postgres_database(admin_url, "payouts")
    url = common.postgres_database_url(admin_url, name)
    database = Database(Settings(database_url=url, db_pool_size=2))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        migrate.upgrade(database)
        source, ids = setup(database, count)
        api_port, bank_port = free_port(), free_port()
        sandbox_db = scratch / f"sandbox-{name}.db"
        env = {
            **os.environ,
            "PAYCORE_DATABASE_URL": url,
            "PAYCORE_PROCESSOR_URL": f"http://127.0.0.1:{bank_port}",
            "PAYCORE_WORKER_INTERVAL_MS": "50",
            "PAYCORE_RESOLVER_BACKOFF_MS": "200",
            "PAYCORE_RESOLVER_BACKOFF_MAX_MS": "1000",
            "PAYCORE_RESOLVER_BATCH_MAX": "50",
            "PAYCORE_DB_POOL_SIZE": "4",
        }
        processes.append(
            start(
                [
                    "processor",
                    "serve",
                    "--port",
                    str(bank_port),
                    "--database-url",
                    f"sqlite:///{sandbox_db}",
                    "--webhook-url",
                    f"http://127.0.0.1:{api_port}/v1/webhooks/processor",
                ],
                env,
                scratch / "sandbox.log",
            )
        )
        processes.append(start(["serve", "--port", str(api_port)], env, scratch / "api.log"))
        wait_ready(bank_port, "/v1/sandbox/faults")
        wait_ready(api_port, "/healthz")
        started = time.monotonic()
        processes.extend(start(["worker"], env, scratch / f"worker-{index}.log") for index in range(workers))
        sent_s = settled_s = None
        while time.monotonic() - started < RUN_TIMEOUT_S:
            found = counts(database)
            past_sent = sum(found.get(s, 0) for s in ("sent", "settled"))
            if sent_s is None and past_sent == count:
                sent_s = time.monotonic() - started
            if found.get("settled", 0) == count:
                settled_s = time.monotonic() - started
                break
            time.sleep(0.05)
        assert settled_s is not None and sent_s is not None, f"not all settled: {counts(database)}"
        check(database, sandbox_db, source, ids)
        return {"sent_s": sent_s, "settled_s": settled_s}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        database.dispose()
        common.drop_postgres_database(admin_url, name)


def check(database: Database, sandbox_db: Path, source: str, ids: list[str]) -> None:
    connection = sqlite3.connect(f"file:{sandbox_db}?mode=ro", uri=True)
    try:
        at_bank = [row[0] for row in connection.execute("SELECT request_id FROM sandbox_bank_payouts")]
    finally:
        connection.close()
    assert sorted(at_bank) == sorted(ids), "every payout at the bank exactly once"
    with database.read() as reader:
        balance = ledger.get_account(reader, TENANT, source).balance
        assert (balance.posted_minor, balance.pending_minor) == (0, 0), balance
        assert verify(reader).ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payouts", type=int, default=1000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs after the run")
    options = parser.parse_args()
    worker_counts = [int(w) for w in options.workers.split(",")]
    print(common.facts_table(common.machine_facts(common.postgres_facts(options.postgres_url))))
    rows, medians = [], {}
    scratch = tempfile.mkdtemp(prefix="payouts-bench-")
    print(f"process logs in {scratch}", flush=True)
    try:
        for repeat in range(1, options.repeat + 1):
            for workers in worker_counts:  # interleaved: 1 and 2 workers side by side in time
                result = run_once(options.postgres_url, options.payouts, workers, Path(scratch))
                rows.append(
                    (workers, repeat, options.payouts / result["sent_s"], options.payouts / result["settled_s"])
                )
                sent_s, settled_s = result["sent_s"], result["settled_s"]
                print(
                    f"workers={workers} run={repeat}: sent in {sent_s:.2f} s, settled in {settled_s:.2f} s", flush=True
                )
    finally:
        if not options.keep_logs:
            shutil.rmtree(scratch, ignore_errors=True)
    for workers in worker_counts:
        mine = [row for row in rows if row[0] == workers]
        medians[workers] = (common.median([r[2] for r in mine]), common.median([r[3] for r in mine]))
    print()
    print(
        common.markdown_table(
            ("workers", "run", "to sent /s", "to settled /s"),
            [(w, r, common.fmt(a), common.fmt(b)) for w, r, a, b in rows],
        )
    )
    print()
    base = medians[worker_counts[0]]
    print(
        common.markdown_table(
            ("workers", "to sent, median /s", "to settled, median /s", "sent vs first"),
            [
                (w, common.fmt(m[0]), common.fmt(m[1]), common.fmt_ratio(common.ratio(m[0], base[0])))
                for w, m in medians.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
