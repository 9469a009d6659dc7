#!/usr/bin/env python3
"""issue 39, point 4: `paycore serve --workers 1` against `--workers 2`, on SQLite and on
PostgreSQL, side by side in one run: credits/s over HTTP and the CPU a credit costs.

Run from the repository root with the project's virtualenv (needs `wrk`: `apt-get install -y wrk`):

    .venv/bin/python bench/serve_workers_bench.py --duration-s 10 --repeats 3

Every round runs the four servers one after another, in an order that alternates from round to
round: `paycore serve --workers W` (no `--dev`: the API alone) on a fresh database (a new SQLite
file; a new `bench_workers_*` PostgreSQL database, migrated, dropped afterwards), --warmup-s of
unmeasured load on another tenant, then --duration-s of load on --tenants tenants at once, one
`wrk -t1` each with its share of --clients keep-alive connections and bench/wrk/credits.lua
(every request a new credit with its own idempotency key, so every 201 is a durably committed
ledger transfer; several tenants, so that one tenant's credit account, a hot row, does not
order every credit). CPU is process accounting over the measured window
(utime + stime from /proc): the `paycore serve` parent and its API processes, and on PostgreSQL
the database's backends; divided by the credits acknowledged (201). wrk's own CPU is not counted
but shares the machine; "machine busy" is every core's use over the window (/proc/stat),
whoever used it: a second process can only add credits/s while some core is idle. Each run is
checked as bench/credits_http_bench.py checks it: the keys in flight
at wrk's stop are re-sent, and the balance must equal the sum of the acknowledged credits.
The table shows the medians; the exit status is non-zero if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _common as common
import credits_http_bench

WORKERS = (1, 2)
BACKENDS = ("sqlite", "postgres")
START_TIMEOUT_S = 60
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
FIGURES = (
    "credits_per_s",
    "cpu_ms_per_credit",
    "api_cpu_ms_per_credit",
    "database_cpu_ms_per_credit",
    "machine_busy_percent",
)


@dataclass
class Run:
    backend: str
    workers: int
    repeat: int
    credits_per_s: float = 0.0
    cpu_ms_per_credit: float = 0.0
    api_cpu_ms_per_credit: float = 0.0
    database_cpu_ms_per_credit: float = 0.0
    p99_ms: float | None = None
    machine_busy_percent: float = 0.0  # every core of the machine, whoever used it
    processes: int = 0
    problems: tuple[str, ...] = ()


def cpu_s(pids: list[int]) -> dict[int, float]:
    """utime + stime of each pid still running, in seconds."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (fields 14, 15)
    return found


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot, from /proc/stat's `cpu` line."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def start(
    backend: str, workers: int, repeat: int, args: argparse.Namespace, workdir: Path
) -> credits_http_bench.Server:
    port = credits_http_bench.free_port()
    tag = f"{backend}-w{workers}-r{repeat}"
    postgres_name = None
    if backend == "sqlite":
        database_url = f"sqlite:///{workdir / f'{tag}.db'}"
    else:
        postgres_name = common.new_postgres_database(args.postgres_url, "workers")
        database_url = common.postgres_database_url(args.postgres_url, postgres_name)
        credits_http_bench._migrate(database_url)  # `paycore serve` upgrades SQLite itself, PostgreSQL by hand
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env.update(PAYCORE_DATABASE_URL=database_url, PAYCORE_SECRETS_KEY=os.environ["PAYCORE_SECRETS_KEY"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(common.REPO / "src"), env.get("PYTHONPATH")]))
    command = [*credits_http_bench.paycore_command(), "serve", "--port", str(port), "--workers", str(workers)]
    log_path = workdir / f"{tag}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    server = credits_http_bench.Server("paycore", port, process, log_path, database_url, postgres_name)
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(children(process.pid)) < (workers if workers > 1 else 0) or not _healthy(port):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{tag} did not start; see {log_path}:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.1)
    time.sleep(1.5 if workers > 1 else 0)  # every child up, not only the first to answer
    return server


def _healthy(port: int) -> bool:
    try:
        return credits_http_bench.http_call(port, "GET", "/healthz")[0] == 200
    except OSError:
        return False


def measure(backend: str, workers: int, repeat: int, args: argparse.Namespace, workdir: Path) -> Run:
    server = start(backend, workers, repeat, args, workdir)
    run = Run(backend, workers, repeat)
    try:
        if args.warmup_s:
            credits_http_bench.run_wrk(server, args, args.warmup_s, "warmup", f"w{repeat}{secrets.token_hex(2)}")
        api = [server.process.pid, *children(server.process.pid)]
        run.processes = len(api)
        database: list[int] = []
        if server.postgres_name is not None:
            database = common.postgres_backends(server.postgres_name)
        api_before, database_before, machine_before = cpu_s(api), cpu_s(database), machine_ticks()
        loads = spread_load(server, args, repeat)
        if server.postgres_name is not None:
            database = common.postgres_backends(server.postgres_name)  # a connection opened in the window too
        api_after, database_after, machine_after = cpu_s(api), cpu_s(database), machine_ticks()
        busy, total = (after - before for after, before in zip(machine_after, machine_before, strict=True))
        run.machine_busy_percent = 100 * busy / max(1, total)
        results = []
        for tenant, (output, summary) in loads.items():
            result = credits_http_bench.RunResult("paycore", repeat, backend)
            credits_http_bench._record_load(result, output, summary)
            credits_http_bench._check_credits(server, result, summary, tenant)
            results.append(result)
        run.problems = tuple(problem for result in results for problem in result.problems)
        run.credits_per_s = sum(result.ok_per_s for result in results)
        run.p99_ms = max(result.p99_ms or 0.0 for result in results)
        credits = max(1, sum(result.ok for result in results))
        api_s = sum(api_after[pid] - api_before.get(pid, 0.0) for pid in api_after)
        database_s = sum(database_after[pid] - database_before.get(pid, 0.0) for pid in database_after)
        run.api_cpu_ms_per_credit = api_s * 1000 / credits
        run.database_cpu_ms_per_credit = database_s * 1000 / credits
        run.cpu_ms_per_credit = run.api_cpu_ms_per_credit + run.database_cpu_ms_per_credit
    finally:
        server.process.send_signal(signal.SIGTERM)
        status = server.process.wait(timeout=60)
        # One process is today's `paycore serve`: uvicorn stops, then dies of the signal it took.
        if status != 0 and not (workers == 1 and status == -signal.SIGTERM):
            run.problems += (f"paycore serve exited {status} on SIGTERM",)
        if server.postgres_name is not None and not args.keep:
            common.drop_postgres_database(args.postgres_url, server.postgres_name)
    return run


def spread_load(server: credits_http_bench.Server, args: argparse.Namespace, repeat: int) -> dict[str, tuple[str, Any]]:
    """One `wrk -t1` per tenant, all at once, the connections shared out: tenant -> (output,
    summary). Several tenants, so that no one tenant's credit account (a hot row, whose lock
    orders its credits on PostgreSQL) is what the figure measures."""
    per_tenant = argparse.Namespace(**{**vars(args), "clients": args.clients // args.tenants})
    tag = f"m{repeat}{secrets.token_hex(2)}"
    tenants = [f"bench-{repeat}-{index}" for index in range(args.tenants)]
    with ThreadPoolExecutor(len(tenants)) as pool:
        runs = {
            tenant: pool.submit(credits_http_bench.run_wrk, server, per_tenant, args.duration_s, tenant, tag)
            for tenant in tenants
        }
        return {tenant: run.result() for tenant, run in runs.items()}


def render(runs: list[Run], facts: list[tuple[str, str]]) -> str:
    rows = []
    for backend in BACKENDS:
        medians = {}
        for workers in WORKERS:
            mine = [run for run in runs if run.backend == backend and run.workers == workers]
            if not mine:
                continue
            medians[workers] = {name: common.median([getattr(run, name) for run in mine]) for name in FIGURES}
            median = medians[workers]
            rows.append(
                [
                    backend,
                    f"--workers {workers}",
                    common.fmt(median["credits_per_s"]),
                    common.fmt(median["cpu_ms_per_credit"], 2),
                    common.fmt(median["api_cpu_ms_per_credit"], 2),
                    common.fmt(median["database_cpu_ms_per_credit"], 2) if backend == "postgres" else "-",
                    f"{common.fmt(median['machine_busy_percent'])}%",
                    ", ".join(common.fmt(run.credits_per_s) for run in mine),
                ]
            )
        if len(medians) == len(WORKERS):
            rate = common.ratio(medians[2]["credits_per_s"], medians[1]["credits_per_s"])
            cpu = common.ratio(medians[2]["cpu_ms_per_credit"], medians[1]["cpu_ms_per_credit"])
            rows.append([backend, "2 / 1", common.fmt_ratio(rate), common.fmt_ratio(cpu), "", "", "", ""])
    headers = [
        "database",
        "API processes",
        "credits/s",
        "CPU ms / credit",
        "API",
        "PostgreSQL",
        "machine busy",
        "each round",
    ]
    problems = [
        f"- {run.backend} --workers {run.workers} round {run.repeat}: {text}" for run in runs for text in run.problems
    ]
    checked = "Every run checked: balance = acknowledged credits; stopped by SIGTERM."
    return "\n\n".join(
        [
            "## `paycore serve --workers 1` against `--workers 2` (credits over HTTP)",
            common.facts_table(facts),
            common.markdown_table(headers, rows),
            "\n".join(problems) if problems else checked,
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16, help="concurrent keep-alive connections (wrk -c)")
    parser.add_argument("--tenants", type=int, default=4, help="tenants credited at once, one wrk each")
    parser.add_argument("--duration-s", type=int, default=10, help="measured seconds per run (whole seconds)")
    parser.add_argument("--warmup-s", type=int, default=3, help="unmeasured seconds of load first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="sqlite,postgres")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL, help="admin URL (libpq form)")
    parser.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    parser.add_argument("--keep", action="store_true", help="keep databases and logs")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR)
    args = parser.parse_args(argv)
    args.threads = 1  # wrk -t1: the client takes as little of the machine as it can
    args.backends = [backend for backend in args.backends.split(",") if backend]
    if not set(args.backends) <= set(BACKENDS) or args.duration_s < 1 or args.repeats < 1:
        parser.error("--backends from sqlite,postgres; --duration-s >= 1; --repeats >= 1")
    if args.tenants < 1 or args.clients % args.tenants:
        parser.error("--tenants >= 1, and --clients a multiple of it")
    if shutil.which(args.wrk) is None:
        parser.error("wrk not found: install it with `apt-get install -y wrk` (Debian package)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="paycore-workers-bench-"))
    per_tenant = args.clients // args.tenants
    load = (
        f"{args.tenants} x wrk -t1 -c{per_tenant} -d{args.duration_s}s -s bench/wrk/credits.lua (one tenant each), "
        f"{args.repeats} rounds"
    )
    facts = common.machine_facts([("load", load), *common.postgres_facts(args.postgres_url)])
    runs: list[Run] = []
    pairs = [(backend, workers) for backend in args.backends for workers in WORKERS]
    try:
        for repeat in range(1, args.repeats + 1):
            for backend, workers in pairs if repeat % 2 else reversed(pairs):
                run = measure(backend, workers, repeat, args, workdir)
                runs.append(run)
                state = "ok" if not run.problems else "FAILED: " + run.problems[0][:300]
                print(
                    f"[{repeat}/{args.repeats}] {backend:8} --workers {workers}: {run.credits_per_s:7,.0f} credits/s, "
                    f"{run.cpu_ms_per_credit:.2f} CPU ms/credit ({run.processes} processes), "
                    f"machine {run.machine_busy_percent:.0f}% busy  {state}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    facts.append(("load average at end (1/5/15 min)", common.load_average()))
    text = render(runs, facts)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (args.out / f"workers-{stamp}.md").write_text(text)
    (args.out / f"workers-{stamp}.json").write_text(json.dumps([asdict(run) for run in runs], indent=2))
    return 1 if any(run.problems for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
