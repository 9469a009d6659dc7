"""paycore deployed as its separate services, for bench/run (bench/targets.py): the sandbox
processor (`paycore processor serve`, its own database), A API processes
(`paycore serve`, no --dev: API only, the processor over HTTP) and W `paycore worker`s, the
schema upgraded by `paycore db upgrade` as an operator does. `serve --dev` runs API, workers and
the sandbox in one process, so it cannot tell a second API process from a second worker.

Also: a payment load that runs until stopped (for measuring something else meanwhile), and the
machine's CPU over a window (/proc/stat) with the CPU of each group of processes (/proc/PID/stat).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common
import payments_bench
import webhooks_bench

WORKER_START_TIMEOUT_S = 60


@dataclass
class SplitDeployment(payments_bench.Deployment):
    """processes: the sandbox first, then the API processes, then the workers."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: Path = Path()


def deploy(
    admin_url: str,
    apis: int,
    workers: int,
    workdir: Path,
    tag: str,
    extra_env: dict[str, str] | None = None,
    before_start: Callable[[str], None] | None = None,
    *,
    backend: str = "postgres",
) -> SplitDeployment:
    """Fresh paycore and sandbox databases (PostgreSQL, or SQLite files in `workdir`), the schema
    upgraded, then the services; the Deployment stops them all and drops the PostgreSQL
    databases. `before_start(database_url)` runs after the upgrade and before any process starts
    (tenants, endpoints)."""
    names: list[str] = []
    if backend == "sqlite":
        database_url = f"sqlite:///{workdir / f'payb-{tag}.db'}"
        sandbox_url = f"sqlite:///{workdir / f'payb-sbx-{tag}.db'}"
    else:
        names = [common.new_postgres_database(admin_url, "payb"), common.new_postgres_database(admin_url, "payb_sbx")]
        database_url = common.postgres_database_url(admin_url, names[0])
        sandbox_url = common.postgres_database_url(admin_url, names[1])
    ports = [payments_bench.free_port() for _ in range(apis)]
    sandbox_port = payments_bench.free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(common.REPO / "src"), os.environ.get("PYTHONPATH")])),
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_PROCESSOR_URL=f"http://127.0.0.1:{sandbox_port}",
        PAYCORE_PROCESSOR_TIMEOUT_MS="2000",
        PAYCORE_SERVE_WORKERS="1",  # one process per API port: the deploy counts its API processes itself
        **(extra_env or {}),
    )
    deployment = SplitDeployment(f"{backend}-split", database_url, sandbox_url, ports, [], [], names, env, workdir)
    try:
        upgrade = subprocess.run(
            [*payments_bench.paycore_command(), "db", "upgrade"], env=env, capture_output=True, text=True, check=False
        )
        if upgrade.returncode != 0:
            raise RuntimeError(f"paycore db upgrade failed: {(upgrade.stdout + upgrade.stderr)[-1500:]}")
        if before_start is not None:
            before_start(database_url)
        sandbox = [
            "processor", "serve", "--port", str(sandbox_port), "--database-url", sandbox_url,
            "--webhook-url", f"http://127.0.0.1:{ports[0]}/v1/webhooks/processor",
        ]  # fmt: skip
        _start(deployment, sandbox, env, workdir / f"sandbox-{tag}.log")
        for index, port in enumerate(ports):
            _start(deployment, ["serve", "--port", str(port)], env, workdir / f"api-{tag}-{index}.log")
            payments_bench.wait_ready(port, deployment.processes[-1], deployment.logs[-1])
        payments_bench.wait_ready(
            sandbox_port,
            deployment.processes[0],
            deployment.logs[0],
            path="/v1/sandbox/faults",
            name="the sandbox processor",
        )
        for _ in range(workers):
            start_worker(deployment, tag)
    except BaseException:
        deployment.stop(admin_url)
        raise
    return deployment


def _start(deployment: SplitDeployment, args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("wb") as sink:
        command = [*payments_bench.paycore_command(), *args]
        deployment.processes.append(subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env))
    deployment.logs.append(log)


def start_worker(deployment: SplitDeployment, tag: str) -> int:
    """One more `paycore worker`, waited for until it logs `worker_started`; returns its pid."""
    log = deployment.workdir / f"worker-{tag}-{len(deployment.logs)}.log"
    _start(deployment, ["worker"], deployment.env, log)
    process = deployment.processes[-1]
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while "worker_started" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return process.pid


# ---------------------------------------------------------------------------- CPU over a window


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; idle and iowait are not busy."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


class CpuWindow:
    """The machine's busy fraction and each group's CPU seconds between start() and stop()."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]]) -> None:
        self.groups = groups
        self.before: dict[str, dict[int, float]] = {}

    def start(self) -> None:
        self.before = {name: webhooks_bench.cpu_snapshot(pids()) for name, pids in self.groups.items()}
        self.client_before = sum(os.times()[:2])
        self.ticks_before = _machine_ticks()
        self.began = time.monotonic()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.began
        busy, total = (after - before for after, before in zip(_machine_ticks(), self.ticks_before, strict=True))
        found = {"wall_s": wall, "machine_busy": busy / total if total else 0.0}
        for name, pids in self.groups.items():
            found[name] = webhooks_bench.cpu_used_s(self.before[name], webhooks_bench.cpu_snapshot(pids()))
        found["client (this process)"] = sum(os.times()[:2]) - self.client_before
        return found


def cpu_note(found: dict[str, float]) -> str:
    """`machine busy 97% of 2 cores; cores used: api 0.61, ... (this benchmark 1.80, other
    processes 0.14)` over the window."""
    wall, cores = found["wall_s"] or 1.0, os.cpu_count() or 1
    used = {name: value / wall for name, value in found.items() if name not in ("wall_s", "machine_busy")}
    ours = sum(used.values())
    others = max(0.0, found["machine_busy"] * cores - ours)  # what the rest of the machine ran meanwhile
    parts = ", ".join(f"{name} {value:.2f}" for name, value in used.items())
    return (
        f"machine busy {found['machine_busy']:.0%} of {cores} cores; cores used: {parts} "
        f"(this benchmark {ours:.2f}, other processes {others:.2f})"
    )


def deployment_groups(deployment: SplitDeployment, apis: int) -> dict[str, Callable[[], list[int]]]:
    """The processes of a deployment by role: the sandbox (first), the APIs, the workers, and
    the PostgreSQL backends of both databases (looked up again at each snapshot)."""
    processes = deployment.processes
    return {
        "sandbox": lambda: [processes[0].pid],
        "api": lambda: [process.pid for process in processes[1 : 1 + apis]],
        "workers": lambda: [process.pid for process in processes[1 + apis :]],
        "postgres": lambda: [pid for name in deployment.postgres_names for pid in common.postgres_backends(name)],
    }


# ---------------------------------------------------------------------------- payments until stopped


class PaymentLoad:
    """`clients` threads posting payments (fresh keys, `tok_ok`) round-robin over `ports` until
    stop(): the load another measurement runs beside."""

    def __init__(self, ports: list[int], clients: int, account: str, tag: str) -> None:
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.errors: list[str] = []
        self.keys = iter(range(10**12))
        self.threads = [
            threading.Thread(target=self._client, args=(ports[index % len(ports)], account, tag), daemon=True)
            for index in range(clients)
        ]
        self.began = time.perf_counter()
        for thread in self.threads:
            thread.start()

    def _client(self, port: int, account: str, tag: str) -> None:
        client = payments_bench.Client(port)
        body = payments_bench.payment_body(account)
        while not self.halt.is_set():
            with self.lock:
                key = f"{tag}-{next(self.keys)}"
            try:
                status = client.call("POST", "/v1/payments", body, {"Idempotency-Key": key})[0]
            except Exception as error:  # reported, and the run is not a figure
                with self.lock:
                    self.errors.append(f"{type(error).__name__}: {error}")
                return
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=120)
        elapsed = time.perf_counter() - self.began
        return {
            "statuses": dict(self.statuses),
            "count_201": self.statuses.get(201, 0),
            "payments_per_s": self.statuses.get(201, 0) / elapsed,
            "errors": self.errors,
        }
