"""Payments end to end (SPEC §6): `POST /v1/payments` over HTTP through `paycore serve --dev`
(API, workers and the in-process sandbox processor in each process), and the time from a lost
response to resolution.

    .venv/bin/python bench/payments_bench.py                      # SQLite (1 process) and PostgreSQL (2 processes)
    .venv/bin/python bench/payments_bench.py --backends sqlite --seconds 5 --repeat 1

Per backend and repeat: a fresh paycore database (and a fresh sandbox database beside it: a
SQLite file, or its own PostgreSQL database on PostgreSQL), the server processes, then
`--clients` threads with keep-alive connections posting payments with new keys (`tok_ok`)
round-robin over the processes for `--seconds`. Checked after each run: every 201 is one
`succeeded` payment, the sandbox holds exactly one charge per payment, `paycore ledger verify`
passes. Then, on one process, `--lost` payments whose response the sandbox drops (resolved
by the sandbox's webhook) and `--lost` whose request it drops (no webhook can come: resolved
by the resolver re-sending the same request id): the time from the 202 to `succeeded`.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def paycore_command() -> list[str]:
    script = Path(sys.executable).with_name("paycore")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from paycore.cli.main import main; main()"]


class Client:
    def __init__(self, port: int) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        for attempt in range(2):
            try:
                self.connection.request(method, path, body=data, headers=sent)
                response = self.connection.getresponse()
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
            except (ConnectionError, http.client.HTTPException):
                self.connection.close()
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


@dataclass
class Deployment:
    backend: str
    database_url: str
    sandbox_url: str
    ports: list[int]
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]
    postgres_names: list[str] = field(default_factory=list)

    def stop(self, admin_url: str) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for name in self.postgres_names:
            common.drop_postgres_database(admin_url, name)


def deploy(backend: str, processes: int, workdir: Path, args: argparse.Namespace, tag: str) -> Deployment:
    names: list[str] = []
    if backend == "sqlite":
        database_url = f"sqlite:///{workdir / f'paycore-{tag}.db'}"
        sandbox_url = f"sqlite:///{workdir / f'sandbox-{tag}.db'}"
    else:
        names = [
            common.new_postgres_database(args.postgres_url, "payb"),
            common.new_postgres_database(args.postgres_url, "payb_sbx"),
        ]
        database_url = common.postgres_database_url(args.postgres_url, names[0])
        sandbox_url = common.postgres_database_url(args.postgres_url, names[1])
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(common.REPO / "src"), env.get("PYTHONPATH")])),
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_SANDBOX_DATABASE_URL=sandbox_url,
        PAYCORE_PROCESSOR_TIMEOUT_MS="2000",
    )
    ports, procs, logs = [], [], []
    for index in range(processes):
        port = free_port()
        log = workdir / f"serve-{tag}-{index}.log"
        with log.open("wb") as sink:
            command = [*paycore_command(), "serve", "--dev", "--port", str(port)]
            procs.append(subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir))
        ports.append(port)
        logs.append(log)
        wait_ready(port, procs[-1], log)  # one at a time: the first migrates
    return Deployment(backend, database_url, sandbox_url, ports, procs, logs, names)


def wait_ready(
    port: int, process: subprocess.Popen[bytes], log: Path, *, path: str = "/readyz", name: str = "paycore"
) -> None:
    """Until `GET path` answers 200 (60 s at most), or the process exits."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited at start-up:\n{log.read_text()[-2000:]}")
        try:
            if Client(port).call("GET", path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not become ready; see {log}")


def merchant_account(port: int, tag: str) -> str:
    status, body = Client(port).call(
        "POST",
        "/v1/accounts",
        {"code": f"merchant.{tag}", "currency": "USD", "normal_balance": "credit"},
        {"Idempotency-Key": f"acct-{tag}"},
    )
    assert status in (200, 201), (status, body)
    return str(body["id"])


def payment_body(account: str, token: str = "tok_ok") -> dict[str, Any]:
    return {
        "amount_minor": 1000,
        "currency": "USD",
        "source": {"type": "card", "token": token},
        "destination_account": account,
    }


def drive(
    ports: list[int], clients: int, seconds: float, request: Callable[[Client, str], int], tag: str
) -> dict[str, Any]:
    """`clients` threads, each with one keep-alive connection (round-robin over `ports`), calling
    `request(connection, fresh idempotency key)` until `seconds` have passed: the client every
    HTTP comparison of payments uses (bench/targets.py drives the reference server with it too)."""
    keys = itertools.count()
    stop_at = time.monotonic() + seconds
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client(index: int) -> None:
        connection = Client(ports[index % len(ports)])
        mine: list[float] = []
        seen: dict[int, int] = {}
        while time.monotonic() < stop_at:
            key = f"{tag}-{next(keys)}"
            started = time.perf_counter()
            status = request(connection, key)
            mine.append(time.perf_counter() - started)
            seen[status] = seen.get(status, 0) + 1
        with lock:
            latencies.extend(mine)
            for status, count in seen.items():
                statuses[status] = statuses.get(status, 0) + count

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "payments_per_s": statuses.get(201, 0) / elapsed,
        "statuses": statuses,
        "p50_ms": (common.percentile(latencies, 0.50) or 0) * 1000,
        "p99_ms": (common.percentile(latencies, 0.99) or 0) * 1000,
        "count_201": statuses.get(201, 0),
    }


def load(deployment: Deployment, account: str, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    def pay(connection: Client, key: str) -> int:
        return connection.call("POST", "/v1/payments", payment_body(account), {"Idempotency-Key": key})[0]

    return drive(deployment.ports, args.clients, args.seconds, pay, tag)


def check(deployment: Deployment, expected_succeeded: int) -> str:
    from sqlalchemy import func, select, text

    from paycore.config import Settings
    from paycore.db.engine import Database
    from paycore_sandbox.models import charges

    database = Database(Settings(database_url=deployment.database_url, db_pool_size=1))
    sandbox = Database(Settings(database_url=deployment.sandbox_url, db_pool_size=1))
    try:
        with database.read() as connection:
            by_status = dict(connection.execute(text("SELECT status, COUNT(*) FROM payments GROUP BY status")).all())
        with sandbox.read() as connection:
            charged = connection.execute(select(func.count()).select_from(charges)).scalar_one()
    finally:
        database.dispose()
        sandbox.dispose()
    verify = subprocess.run(
        [*paycore_command(), "ledger", "verify"],
        env={**os.environ, "PAYCORE_DATABASE_URL": deployment.database_url},
        capture_output=True,
        text=True,
        check=False,
    )
    problems = []
    if by_status.get("succeeded", 0) < expected_succeeded:
        problems.append(f"succeeded {by_status} < 201s {expected_succeeded}")
    if charged != sum(by_status.values()):
        problems.append(f"sandbox charges {charged} != payments {sum(by_status.values())}")
    if verify.returncode != 0:
        problems.append("ledger verify FAILED: " + verify.stdout[-500:])
    return "ok" if not problems else "; ".join(problems)


def resolution_times(deployment: Deployment, account: str, fault: str, count: int, tag: str) -> list[float]:
    client = Client(deployment.ports[0])
    times = []
    for index in range(count):
        plan = {"rules": [{"fault": fault, "next_n": 1, "ops": ["charge"]}]}
        assert client.call("PUT", "/sandbox/v1/sandbox/faults", plan)[0] == 200
        status, body = client.call(
            "POST", "/v1/payments", payment_body(account), {"Idempotency-Key": f"{tag}-{fault}-{index}"}
        )
        lost_at = time.perf_counter()
        assert status == 202 and body["status"] == "in_doubt", (status, body)
        while True:
            _, now = client.call("GET", f"/v1/payments/{body['id']}")
            if now["status"] != "in_doubt":
                assert now["status"] == "succeeded", now
                break
            if time.perf_counter() - lost_at > 120:
                raise RuntimeError(f"{body['id']} still in_doubt after 120 s")
            time.sleep(0.01)
        times.append(time.perf_counter() - lost_at)
    return times


def run(args: argparse.Namespace) -> str:
    rows = []
    resolution_rows = []
    workdir = Path(tempfile.mkdtemp(prefix="paycore-paybench-"))
    for backend in args.backends.split(","):
        processes = 1 if backend == "sqlite" else args.postgres_processes
        for repeat in range(1, args.repeat + 1):
            tag = f"{backend}-r{repeat}"
            deployment = deploy(backend, processes, workdir, args, tag)
            try:
                account = merchant_account(deployment.ports[0], tag)
                result = load(deployment, account, args, tag)
                time.sleep(2)  # let webhooks land before the books are checked
                verdict = check(deployment, result["count_201"])
                rows.append(
                    [
                        backend,
                        processes,
                        repeat,
                        common.fmt(result["payments_per_s"]),
                        common.fmt(result["p50_ms"]),
                        common.fmt(result["p99_ms"]),
                        json.dumps(result["statuses"]),
                        verdict,
                    ]
                )
                print(rows[-1], flush=True)
                if repeat == 1:
                    for fault, via in (("drop_response", "webhook"), ("drop_request", "resolver (no webhook)")):
                        times = sorted(resolution_times(deployment, account, fault, args.lost, tag))
                        resolution_rows.append(
                            [
                                backend,
                                fault,
                                via,
                                len(times),
                                common.fmt(common.median(times) * 1000),
                                common.fmt(times[-1] * 1000),
                            ]
                        )
                        print(resolution_rows[-1], flush=True)
            finally:
                deployment.stop(args.postgres_url)
    medians = []
    for backend in args.backends.split(","):
        values = [float(row[3].replace(",", "")) for row in rows if row[0] == backend]
        medians.append([backend, common.fmt(common.median(values))])
    return "\n".join(
        [
            "## Payments end to end (bench/payments_bench.py)",
            "",
            f"Command: `{common.command_line()}`",
            "",
            common.facts_table(common.machine_facts([("workdir filesystem", common.filesystem_of(workdir))])),
            "",
            common.markdown_table(
                ["backend", "API processes", "repeat", "payments/s", "p50 ms", "p99 ms", "statuses", "check"], rows
            ),
            "",
            common.markdown_table(["backend", "median payments/s"], medians),
            "",
            common.markdown_table(
                ["backend", "fault", "resolved by", "payments", "median ms to succeeded", "max ms"], resolution_rows
            ),
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lost", type=int, default=10, help="payments per lost-answer measurement")
    parser.add_argument("--postgres-processes", type=int, default=2)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    return parser.parse_args(argv)


if __name__ == "__main__":
    report = run(parse_args())
    print(report)
