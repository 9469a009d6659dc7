"""Outgoing webhooks (issue 21): deliveries/s and latency through real `paycore worker`
processes on PostgreSQL, and what one delivery costs beside the state change that made it.

    .venv/bin/python bench/webhooks_bench.py [--events 2000] [--tenants 4] [--workers 1,2]
        [--concurrency 4] [--poll-ms 250] [--rate 50] [--latency-s 10] [--changes 500] [--repeat 3]

Why: a delivery is paid for by every state change (payments, refunds, payouts), so its cost
must stay small beside the change itself, and a backlog must drain faster than it fills.

Every run gets a database of its own, `--tenants` tenants with one endpoint each (an endpoint
is served by one delivery thread at a time, so the tenants bound the parallelism), all
pointing at one receiver in this process: a `ThreadingHTTPServer` that answers 200 at once.
Events are real state changes: payouts scheduled through the service (one `payout.scheduled`
each), for tomorrow, so that nothing but webhooks is due. The workers' other jobs are put to
sleep (PAYCORE_WORKER_INTERVAL_MS=600000, after their first round at start) so that their
CPU is the deliveries'; their processor is a port nobody listens on.

- throughput: `--events` events (spread over the tenants, one transaction per tenant) are
  pending before W workers start. Deliveries/s over the steady state (the receiver's first
  arrival to its last) and over the whole run (the workers' start to the last arrival); CPU
  per delivered event over the steady state: the workers' (user + system, from /proc) and the
  database's PostgreSQL backends' (found by their process title).
- latency: W workers running and idle; events made at `--rate`/s for `--latency-s`, one
  transaction each, round-robin over the tenants; latency = the receiver's arrival minus the
  event's `created_at` (the state change's clock): p50, p99, max.
- baseline: the state change itself, `--changes` payouts scheduled one per transaction in this
  process (what `POST /v1/payouts` does, without HTTP), with the same endpoints (so the
  fan-out's delivery rows are counted in the change): wall, this process's CPU and its
  PostgreSQL backend's CPU per change. docs/benchmarks.md has the payment path's own figures
  (`payments_bench.py`, `profile_payment.py`) for the HTTP path.

Checked after each run: every delivery `delivered`, every one received, a delivery id received
twice is counted (at least once allows it; none is expected). The receiver shares this
process, and the machine's cores with the workers and PostgreSQL. Prints tables; writes nothing.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sqlalchemy import Connection, func, select

import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.keyring import Keyring
from paycore.kit.clock import now_us, parse_rfc3339
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary
from paycore.webhooks import service as webhooks
from paycore.webhooks.models import webhook_deliveries

AMOUNT_MINOR = 100
FUNDS_MINOR = 10**12  # enough for any run's payouts
RUN_TIMEOUT_S = 300
START_TIMEOUT_S = 30
POLL_S = 0.01
BENEFICIARY = Beneficiary("Bench", routing_number="110000000", account_number="000123456789")
PAYCORE = [str(Path(sys.executable).parent / "paycore")]  # the installed entry point of this venv
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SECRETS_KEY = os.urandom(32)  # this run's PAYCORE_SECRETS_KEY: the endpoints are sealed with it, the workers open them
KEYRING = Keyring([SECRETS_KEY])


# ---------------------------------------------------------------------------- the receiver


class Receiver(http.server.ThreadingHTTPServer):
    """Answers every POST 200 at once; records (arrival time.time(), delivery id, body)."""

    daemon_threads = True
    request_queue_size = 256  # the default (5) drops connections when 8 threads POST at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, str, bytes]] = []
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def count(self) -> int:
        with self.lock:
            return len(self.arrivals)

    def take(self) -> list[tuple[float, str, bytes]]:
        with self.lock:
            taken, self.arrivals = self.arrivals, []
        return taken

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        arrived_s = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with self.server.lock:
            self.server.arrivals.append((arrived_s, self.headers.get("Paycore-Delivery-Id", ""), body))

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


# ---------------------------------------------------------------------------- CPU from /proc


def cpu_s(pid: int) -> float | None:
    """A process's user + system CPU so far; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def cpu_snapshot(pids: list[int]) -> dict[int, float]:
    return {pid: found for pid in pids if (found := cpu_s(pid)) is not None}


def cpu_used_s(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU between two snapshots; a process born in between counts from zero."""
    return sum(used - before.get(pid, 0.0) for pid, used in after.items())


# ---------------------------------------------------------------------------- database and events


@dataclass
class Scratch:
    name: str
    url: str
    database: Database
    sources: dict[str, str]  # tenant -> a funded source account


@contextmanager
def scratch_database(admin_url: str, tenants: list[str], receiver_url: str) -> Iterator[Scratch]:
    """A migrated database of its own, each tenant with one endpoint and a funded source."""
    name = common.new_postgres_database(admin_url, "webhooks")
    url = common.postgres_database_url(admin_url, name)
    database = Database(Settings(database_url=url, db_pool_size=4))
    try:
        migrate.upgrade(database)
        sources = {tenant: database.transaction(lambda c, t=tenant: _tenant(c, t, receiver_url)) for tenant in tenants}
        yield Scratch(name, url, database, sources)
    finally:
        database.dispose()
        common.drop_postgres_database(admin_url, name)


def _tenant(connection: Connection, tenant: str, receiver_url: str) -> str:
    now = now_us()
    webhooks.create_endpoint(
        connection, tenant, keyring=KEYRING, url=receiver_url, events=["*"], description=None, now_us=now
    )
    source, funding = (
        ledger.create_account(
            connection,
            tenant,
            code=code,
            currency="USD",
            normal_balance=normal,
            no_overdraft=False,
            metadata={},
            now_us=now,
        ).id
        for code, normal in (("seller", "credit"), ("funding", "debit"))
    )
    spec = TransferSpec(entries=(EntrySpec(funding, "debit", FUNDS_MINOR), EntrySpec(source, "credit", FUNDS_MINOR)))
    ledger.create_transfer(connection, tenant, spec, now_us=now)
    return source


def schedule(scratch: Scratch, tenant: str, count: int) -> None:
    """`count` payouts scheduled in one transaction: `count` events, published at its commit."""
    tomorrow = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat()
    new = NewPayout(AMOUNT_MINOR, "USD", scratch.sources[tenant], "ach", BENEFICIARY, execute_on=tomorrow)

    def work(connection: Connection) -> None:
        now = now_us()
        for _ in range(count):
            payouts.schedule(connection, tenant, new, actor="local", now_us=now)

    scratch.database.transaction(work)


def delivery_counts(database: Database) -> dict[str, int]:
    query = select(webhook_deliveries.c.status, func.count()).group_by(webhook_deliveries.c.status)
    with database.read() as connection:
        return {str(status): int(count) for status, count in connection.execute(query)}


# ---------------------------------------------------------------------------- workers


def start_workers(
    count: int, scratch: Scratch, options: argparse.Namespace, logs: Path
) -> list[subprocess.Popen[bytes]]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = probe.getsockname()[1]  # closed at once: nobody listens there
    env.update(
        PAYCORE_DATABASE_URL=scratch.url,
        PAYCORE_DB_POOL_SIZE=str(options.concurrency + 2),
        PAYCORE_PROCESSOR_URL=f"http://127.0.0.1:{nobody}",
        PAYCORE_WORKER_INTERVAL_MS="600000",
        PAYCORE_WEBHOOK_CONCURRENCY_MAX=str(options.concurrency),
        PAYCORE_WEBHOOK_POLL_MS=str(options.poll_ms),
        PAYCORE_SECRETS_KEY=base64.urlsafe_b64encode(SECRETS_KEY).decode(),  # the one the endpoints were sealed with
    )
    started = []
    for index in range(count):
        log = (logs / f"{scratch.name}-worker-{index}.log").open("wb")
        started.append(subprocess.Popen([*PAYCORE, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT))
    return started


def wait_started(scratch: Scratch, logs: Path, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    for index in range(count):
        log = logs / f"{scratch.name}-worker-{index}.log"
        while "worker_started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise SystemExit(f"worker {index} did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(POLL_S)


def stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_arrivals(receiver: Receiver, count: int) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while receiver.count() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {receiver.count()} of {count} deliveries arrived within {RUN_TIMEOUT_S} s")
        time.sleep(POLL_S)


def wait_recorded(scratch: Scratch, expected: int) -> None:
    """Until every delivery is recorded `delivered`: the last attempts are recorded just after
    the receiver answered, and a worker stopped before that would leave them to be sent again."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while (found := delivery_counts(scratch.database)) != {"delivered": expected}:
        if time.monotonic() > deadline:
            raise SystemExit(f"deliveries not all delivered: {found}, {expected} expected")
        time.sleep(0.05)


def duplicates_of(arrivals: list[tuple[float, str, bytes]], expected: int) -> int:
    """Every delivery received; returns how many arrivals repeated a delivery id."""
    ids = [delivery_id for _, delivery_id, _ in arrivals]
    assert len(set(ids)) == expected, (len(set(ids)), expected)
    return len(ids) - expected


# ---------------------------------------------------------------------------- the three runs


def run_throughput(options: argparse.Namespace, workers: int, receiver: Receiver, logs: Path) -> dict[str, Any]:
    tenants = [f"tenant-{index}" for index in range(options.tenants)]
    with scratch_database(options.postgres_url, tenants, receiver.url) as scratch:
        for index, tenant in enumerate(tenants):  # --events spread over the tenants
            schedule(scratch, tenant, options.events // len(tenants) + (index < options.events % len(tenants)))
        receiver.take()
        began = time.monotonic()
        processes = start_workers(workers, scratch, options, logs)
        try:
            wait_arrivals(receiver, 1)
            pids = [process.pid for process in processes]
            workers_before, backends_before = cpu_snapshot(pids), cpu_snapshot(common.postgres_backends(scratch.name))
            counted_from = receiver.count()
            wait_arrivals(receiver, options.events)
            workers_used = cpu_used_s(workers_before, cpu_snapshot(pids))
            backends_used = cpu_used_s(backends_before, cpu_snapshot(common.postgres_backends(scratch.name)))
            whole_s = time.monotonic() - began
            wait_recorded(scratch, options.events)
        finally:
            stop_workers(processes)
        arrivals = receiver.take()
        duplicates = duplicates_of(arrivals, options.events)
    times = sorted(arrived for arrived, _, _ in arrivals)
    steady = len(times) - counted_from
    return {
        "steady_per_s": (len(times) - 1) / (times[-1] - times[0]),
        "whole_per_s": len(times) / whole_s,
        "worker_cpu_ms": workers_used / steady * 1000,
        "postgres_cpu_ms": backends_used / steady * 1000,
        "duplicates": duplicates,
    }


def run_latency(options: argparse.Namespace, workers: int, receiver: Receiver, logs: Path) -> dict[str, Any]:
    tenants = [f"tenant-{index}" for index in range(options.tenants)]
    total = int(options.rate * options.latency_s)
    with scratch_database(options.postgres_url, tenants, receiver.url) as scratch:
        processes = start_workers(workers, scratch, options, logs)
        try:
            wait_started(scratch, logs, workers)
            time.sleep(1)  # their first round of the other jobs, then only the delivery threads
            receiver.take()
            began = time.monotonic()
            for index in range(total):
                time.sleep(max(0.0, began + index / options.rate - time.monotonic()))
                schedule(scratch, tenants[index % len(tenants)], 1)
            behind_s = time.monotonic() - began - options.latency_s  # > 0: the rate was not kept
            wait_arrivals(receiver, total)
            wait_recorded(scratch, total)
        finally:
            stop_workers(processes)
        arrivals = receiver.take()
        duplicates = duplicates_of(arrivals, total)
    latencies = sorted(at - parse_rfc3339(json.loads(body)["created_at"]) / 1e6 for at, _, body in arrivals)
    p50, p99 = common.percentile(latencies, 0.5), common.percentile(latencies, 0.99)  # nearest rank
    assert p50 is not None and p99 is not None
    return {
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
        "max_ms": latencies[-1] * 1000,
        "behind_s": max(0.0, behind_s),
        "duplicates": duplicates,
    }


def run_baseline(options: argparse.Namespace, receiver: Receiver) -> dict[str, Any]:
    tenants = [f"tenant-{index}" for index in range(options.tenants)]
    with scratch_database(options.postgres_url, tenants, receiver.url) as scratch:
        schedule(scratch, tenants[0], 1)  # the pool's connection open, the statements warm
        mine = common.postgres_backends(scratch.name)
        backends_before, cpu_before, began = cpu_snapshot(mine), time.process_time(), time.perf_counter()
        for index in range(options.changes):
            schedule(scratch, tenants[index % len(tenants)], 1)
        wall_s, process_s = time.perf_counter() - began, time.process_time() - cpu_before
        backends_used = cpu_used_s(backends_before, cpu_snapshot(common.postgres_backends(scratch.name)))
    return {
        "wall_ms": wall_s / options.changes * 1000,
        "process_cpu_ms": process_s / options.changes * 1000,
        "postgres_cpu_ms": backends_used / options.changes * 1000,
    }


# ---------------------------------------------------------------------------- report


def print_report(options: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    def median_of(key: str, name: str) -> float | None:
        return common.median([run[name] for run in results[key]])

    headers = ("workers", "deliveries/s steady (median)", "each repeat", "deliveries/s incl. start")
    headers += ("worker CPU ms / delivery", "PostgreSQL CPU ms / delivery", "latency p50 ms", "p99 ms", "max ms")
    rows = []
    for workers in options.worker_counts:
        put, late = f"throughput-{workers}", f"latency-{workers}"
        rows.append(
            (
                workers,
                common.fmt(median_of(put, "steady_per_s")),
                ", ".join(common.fmt(run["steady_per_s"]) for run in results[put]),
                common.fmt(median_of(put, "whole_per_s")),
                common.fmt(median_of(put, "worker_cpu_ms"), 2),
                common.fmt(median_of(put, "postgres_cpu_ms"), 2),
                *(common.fmt(median_of(late, name)) for name in ("p50_ms", "p99_ms", "max_ms")),
            )
        )
    print(common.markdown_table(headers, rows))
    print()
    cost_headers = ("per event", "wall ms", "paycore CPU ms", "PostgreSQL CPU ms", "CPU vs the change")
    print(common.markdown_table(cost_headers, _cost_rows(options, median_of)))
    duplicates = sum(run.get("duplicates", 0) for runs in results.values() for run in runs)
    behind_s = max(run["behind_s"] for key, runs in results.items() if key.startswith("latency") for run in runs)
    print(
        f"\ndelivery ids received twice: {duplicates}; latency runs behind their event rate by up to {behind_s:.2f} s"
    )


def _cost_rows(options: argparse.Namespace, median_of: Any) -> list[tuple[str, ...]]:
    """Per event: the state change (the baseline) and one delivery, wall and CPU."""
    change = {name: median_of("baseline", name) for name in ("wall_ms", "process_cpu_ms", "postgres_cpu_ms")}
    change_cpu_ms = change["process_cpu_ms"] + change["postgres_cpu_ms"]
    rows = [
        (
            "state change: a payout scheduled, one transaction, in-process",
            *(common.fmt(change[name], 2) for name in ("wall_ms", "process_cpu_ms", "postgres_cpu_ms")),
            "1.00x",
        )
    ]
    for workers in options.worker_counts:
        put = f"throughput-{workers}"
        worker_ms, postgres_ms = median_of(put, "worker_cpu_ms"), median_of(put, "postgres_cpu_ms")
        rows.append(
            (
                f"one delivery, {workers} worker(s) (wall: 1 / steady deliveries/s)",
                common.fmt(1000 / median_of(put, "steady_per_s"), 2),
                common.fmt(worker_ms, 2),
                common.fmt(postgres_ms, 2),
                common.fmt_ratio(common.ratio(worker_ms + postgres_ms, change_cpu_ms)),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000, help="pending before the workers start")
    parser.add_argument("--tenants", type=int, default=4, help="one endpoint each")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--concurrency", type=int, default=4, help="PAYCORE_WEBHOOK_CONCURRENCY_MAX")
    parser.add_argument("--poll-ms", type=int, default=250, help="PAYCORE_WEBHOOK_POLL_MS")
    parser.add_argument("--rate", type=float, default=50, help="events/s in the latency run")
    parser.add_argument("--latency-s", type=float, default=10)
    parser.add_argument("--changes", type=int, default=500, help="state changes timed in the baseline")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    options = parser.parse_args()
    assert options.events >= 2 and options.tenants >= 1 and options.rate > 0, "nothing to measure"
    options.worker_counts = [int(w) for w in options.workers.split(",")]
    print(common.facts_table(common.machine_facts(common.postgres_facts(options.postgres_url))))
    print()
    results: dict[str, list[dict[str, Any]]] = {"baseline": []}
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-"))
    receiver = Receiver()
    try:
        for repeat in range(1, options.repeat + 1):  # interleaved: every configuration once per round
            results["baseline"].append(run_baseline(options, receiver))
            for workers in options.worker_counts:
                for kind, run in (("throughput", run_throughput), ("latency", run_latency)):
                    found = run(options, workers, receiver, logs)
                    results.setdefault(f"{kind}-{workers}", []).append(found)
                    print(f"round {repeat}, {kind}, {workers} worker(s): {found}", file=sys.stderr, flush=True)
    finally:
        receiver.close()
        shutil.rmtree(logs, ignore_errors=True)
    print_report(options, results)


if __name__ == "__main__":
    main()
