"""Where a payment's CPU goes in the API process, over HTTP on PostgreSQL or SQLite (issue 31).

    .venv/bin/python bench/profile_api.py [--clients 8] [--duration-s 20] [--rate 100] [--backend sqlite]
        [--process sandbox]

Deploys paycore as its services (`bench/_split_deploy.py`: 1 `paycore serve`, 1 `paycore
worker`, the sandbox as `paycore processor serve`), posts payments over HTTP from client
threads, and samples the API process (or, with `--process sandbox`, the sandbox's) with py-spy
(`--gil`: only the thread holding the GIL, i.e. the process's Python CPU) for the window. Each
sample goes to one bucket, by what the innermost paycore frame was doing (`bucket_of`), so the
buckets add up to the samples. It prints the buckets' shares, the SQL's share by the function
that ran it (building the statement or executing it), payments/s and the API process's CPU per
payment (from /proc).

What it is for: the share in `sql: ...` is the most that doing a payment's SQL in fewer round
trips (a server-side function per phase) could save in this process; everything else stays.

py-spy is not a project dependency: `.venv/bin/pip install py-spy` (it needs ptrace, e.g. root).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import _split_deploy as split
import payments_bench

SQL = ("sqlalchemy/", "psycopg/")
RENDERING = ("json/", "pydantic", "orjson")
SERVER = ("uvicorn/", "starlette/", "fastapi/", "httptools", "anyio/", "asyncio/")


def bucket_of(stack: str) -> str:
    """Where a sample's time goes: by what the innermost paycore frame was calling (SQL, the
    rendering of JSON and schemas), else by that frame's module."""
    frames = [(match.group("function"), match.group("file")) for match in FRAME.finditer(stack)]
    ours = [index for index, (_, file) in enumerate(frames) if file.startswith(("paycore/", "paycore_sandbox/"))]
    if not ours:
        return "HTTP: uvicorn, starlette, FastAPI" if any(f.startswith(SERVER) for _, f in frames) else "other"
    file = frames[ours[-1]][1]
    below = frames[ours[-1] + 1 :]
    if any(name == "commit" for name, _ in below) and any(f.startswith(SQL) for _, f in below):
        return "sql: commit"
    if any(f.startswith(SQL) for _, f in below):
        return "sql: statements (SQLAlchemy + psycopg, client side)"
    if file.startswith("paycore/processor/") or any("http/client.py" in f for _, f in below):
        return "processor call (HTTP client to the sandbox)"
    if any(f.startswith(RENDERING) for _, f in below) or file.endswith("schemas.py"):
        return "rendering: JSON and schemas"
    if file.startswith("paycore/http/"):
        return "paycore/http (middleware, routers)"
    return f"paycore's domains: {file.split('/')[1]}"


FRAME = re.compile(r"(?P<function>[\w<>.]+) \((?P<file>[^:)]+)(?::\d+)?\)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration-s", type=int, default=20)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--process", choices=("api", "sandbox"), default="api", help="which process py-spy samples")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="paycore-profile-api-"))
    deployment = split.deploy(args.postgres_url, 1, 1, workdir, "prof", backend=args.backend)
    try:
        account = payments_bench.merchant_account(deployment.ports[0], "prof")
        api_pid = deployment.processes[1 if args.process == "api" else 0].pid
        load = split.PaymentLoad(deployment.ports, args.clients, account, "prof-warm")
        time.sleep(3)
        load.stop()
        before = _cpu_s(api_pid)
        load = split.PaymentLoad(deployment.ports, args.clients, account, "prof")
        raw = workdir / "api.txt"
        subprocess.run(
            [spy, "record", "--gil", "-r", str(args.rate), "-d", str(args.duration_s), "-f", "raw", "-o", str(raw),
             "-p", str(api_pid)],
            check=True, capture_output=True,
        )  # fmt: skip
        found = load.stop()
        cpu_s = _cpu_s(api_pid) - before
    finally:
        deployment.stop(args.postgres_url)
    counts: collections.Counter[str] = collections.Counter()
    callers: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            counts[bucket_of(stack)] += int(count)
            caller = sql_caller(stack)
            if caller is not None:
                callers[caller] += int(count)
    total = sum(counts.values()) or 1
    payments = found["count_201"]
    print(f"payments: {payments} in the window ({found['payments_per_s']:.0f}/s), statuses {found['statuses']}")
    per_payment_ms = 1000 * cpu_s / max(payments, 1)
    print(f"{args.process} process CPU: {cpu_s:.1f} s, {per_payment_ms:.2f} ms a payment (py-spy's own cost included)")
    print(f"py-spy samples (GIL held): {total}, raw stacks in {raw}")
    for name, count in counts.most_common():
        print(f"  {name:<56} {count / total:6.1%}")
    print("the SQL statements' share by the paycore function that ran them (building | executing):")
    for name, count in callers.most_common(12):
        print(f"  {name:<56} {count / total:6.1%}")
    return 0


def sql_caller(stack: str) -> str | None:
    """For a sample in SQL statements: `function | building` when SQLAlchemy was building the
    statement (no execute below it yet), else `function | executing`."""
    if not bucket_of(stack).startswith("sql: statements"):
        return None
    frames = [(match.group("function"), match.group("file")) for match in FRAME.finditer(stack)]
    ours = [index for index, (_, file) in enumerate(frames) if file.startswith(("paycore/", "paycore_sandbox/"))]
    function = frames[ours[-1]][0]
    below = frames[ours[-1] + 1 :]
    running = any(name.startswith(("Connection.", "Result.", "CursorResult.")) for name, _ in below) or any(
        file.startswith("psycopg/") for _, file in below
    )
    return f"{function} | {'executing' if running else 'building'}"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
