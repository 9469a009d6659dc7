#!/usr/bin/env python3
"""Credits over HTTP, two commits side by side in one run (ADR 0026's first step, issue 39).

    .venv/bin/python bench/credits_side_by_side.py --before 9fb27fe --after HEAD --rounds 5

Each commit's `src/` is exported (`git archive`) to a scratch directory; `paycore serve` runs from
it with this virtualenv (same dependencies), on a fresh database per round (SQLite by default, or
a scratch PostgreSQL database with --backend postgres, dropped after). The rounds alternate
before/after (and which goes first), so a drift of the machine falls on both. In each round the
same client (`payments_bench.drive`: keep-alive http.client threads, a fresh key per request)
posts credits to one tenant for --duration-s after a warm-up; the server's CPU is read from
process accounting (`/proc/<pid>/stat` utime + stime of the server and its children) around the
measured window, plus, on PostgreSQL, its backends' (they do the call's work). Reported:
credits/s and CPU per credit (µs) per round, their medians, and the after/before ratios. The
books are checked after each round (the balance covers every acknowledged credit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
import credits_http_bench
import payments_bench

TENANT = "bench"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def export(commit: str, into: Path) -> Path:
    """The commit's src/ in `into` (read from git's objects: no work tree is touched)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=common.REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def cpu_s(pid: int) -> float:
    """utime + stime of `pid` and of its live children, in seconds."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / _TICKS_PER_S


def start(src: Path, database_url: str, workdir: Path, tag: str) -> credits_http_bench.Server:
    """`paycore serve` from the exported `src` (first on PYTHONPATH, before the editable install)."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1", "PAYCORE_DATABASE_URL": database_url}
    paycore = [*credits_http_bench.paycore_command()]
    if database_url.startswith("postgresql"):
        subprocess.run([*paycore, "db", "upgrade"], env=env, cwd=workdir, check=True, capture_output=True)
    port = credits_http_bench.free_port()
    log_path = workdir / f"{tag}.log"
    with log_path.open("wb") as log:
        command = [*paycore, "serve", "--host", "127.0.0.1", "--port", str(port)]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    server = credits_http_bench.Server("paycore", port, process, log_path, database_url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited at start-up; see {log_path}:\n{log_path.read_text()[-2000:]}")
        try:
            if credits_http_bench.http_call(port, "GET", "/healthz")[0] < 500:
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"serve did not answer within 60 s; see {log_path}")


def one_round(label: str, src: Path, args: argparse.Namespace, workdir: Path, number: int) -> dict[str, Any]:
    postgres_name = None
    if args.backend == "postgres":
        postgres_name = common.new_postgres_database(args.postgres_url, "credits")
        database_url = common.postgres_database_url(args.postgres_url, postgres_name)
    else:
        database_url = f"sqlite:///{workdir / f'{label}-{number}.db'}"
    server = start(src, database_url, workdir, f"{label}-{number}")

    def request(client: payments_bench.Client, key: str) -> int:
        return int(client.call("POST", f"/v1/tenants/{TENANT}/credits", credits_http_bench.credit_body(key, 1))[0])

    def used_s() -> float:
        backends = [] if postgres_name is None else common.postgres_backends(postgres_name)
        return cpu_s(server.process.pid) + sum(cpu_s(pid) for pid in backends)

    try:
        payments_bench.drive([server.port], args.clients, args.warmup_s, request, f"w{label}{number}")
        before_s = used_s()
        result = payments_bench.drive([server.port], args.clients, args.duration_s, request, f"m{label}{number}")
        spent_s = used_s() - before_s
        status, balance = credits_http_bench.http_call(server.port, "GET", f"/v1/tenants/{TENANT}/balance")
        created = result["count_201"]
        assert status == 200 and balance["amount_minor"] >= created, (status, balance, created)
    finally:
        server.stop()
        if postgres_name is not None:
            common.drop_postgres_database(args.postgres_url, postgres_name)
    return {
        "label": label,
        "credits_per_s": result["payments_per_s"],
        "cpu_us_per_credit": spent_s * 1e6 / max(created, 1),
        "p99_ms": result["p99_ms"],
        "statuses": result["statuses"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="main")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration-s", type=float, default=10)
    parser.add_argument("--warmup-s", type=float, default=2)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="credits-side-by-side-") as scratch:
        workdir = Path(scratch)
        sources = {
            label: export(commit, workdir / f"tree-{label}")
            for label, commit in (("before", args.before), ("after", args.after))
        }
        rows = []
        for number in range(args.rounds):
            order = ("before", "after") if number % 2 == 0 else ("after", "before")
            for label in order:
                row = one_round(label, sources[label], args, workdir, number)
                rows.append(row)
                print(
                    f"round {number} {label}: {row['credits_per_s']:.0f}/s,"
                    f" {row['cpu_us_per_credit']:.0f} µs CPU a credit, p99 {row['p99_ms']:.1f} ms, {row['statuses']}",
                    flush=True,
                )
    summary(rows, args)


def summary(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    medians = {}
    for label in ("before", "after"):
        mine = [row for row in rows if row["label"] == label]
        medians[label] = (
            common.median([row["credits_per_s"] for row in mine]),
            common.median([row["cpu_us_per_credit"] for row in mine]),
        )
    print(
        f"\n{args.backend}, {args.clients} clients, {args.rounds} rounds of {args.duration_s} s,"
        f" before {args.before}, after {args.after}"
    )
    print("| commit | credits/s (median) | CPU µs a credit, server (median) |")
    print("|---|---|---|")
    for label, (rate, cpu) in medians.items():
        print(f"| {label} | {rate:.0f} | {cpu:.0f} |")
    (rate_before, cpu_before), (rate_after, cpu_after) = medians["before"], medians["after"]
    assert None not in (rate_before, cpu_before, rate_after, cpu_after)
    print(f"| after / before | {rate_after / rate_before:.2f}x | {cpu_after / cpu_before:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
