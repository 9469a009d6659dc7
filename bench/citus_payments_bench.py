"""Payments on one PostgreSQL against the same on a Citus coordinator and two workers (ADR 0031),
side by side in one run: payments/s over HTTP and the machine's CPU a payment costs.

    .venv/bin/python bench/citus_payments_bench.py --seconds 10 --repeat 3     # as root (scripts/citus)

Per round, in an order that alternates from round to round: a fresh paycore database, either on
the PostgreSQL of 127.0.0.1:5432 or on the Citus cluster of `scripts/citus` (coordinator 5441,
workers 5442 and 5443: a database made on every node, `paycore db upgrade`, then
`paycore db distribute`), the sandbox's own database on 5432 for both; one `paycore serve --dev`
process (API, workers and the sandbox in process); `--clients` threads posting payments with new
keys (`tok_ok`) for `--seconds` (`payments_bench.drive`); then the books checked as
`payments_bench.py` checks them (every 201 one succeeded payment, one charge each,
`paycore ledger verify`). With `--baseline PAYCORE` (another checkout's `paycore` executable,
e.g. main's `.venv/bin/paycore`) a third target, `citus-baseline`, runs the same on Citus with
that code (its migrations, `db distribute`, `serve` and `ledger verify`): a change's before and
after side by side in one run. CPU is the whole machine's busy time over the load window
(/proc/stat), divided by the payments acknowledged: every process counts (the client threads,
paycore, every node's backends), alike for both sides, and so does anything else the machine
runs meanwhile: on a shared machine a slower target is charged more of the others' work (its
window is longer per payment), so compare targets of one run, never runs.

On this machine's two cores the three Citus nodes share the cores the one PostgreSQL has to
itself: this measures what distribution costs a payment (the coordinator's routing, the
workers' connections), not what it gains (a tenant's node on a machine of its own). A cluster
this script started (5441 not answering when it began) is stopped at the end.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import payments_bench as payments

TARGETS = ("postgres", "citus")
BASELINE = "citus-baseline"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
CITUS_PORTS = (5443, 5442, 5441)


def machine_busy_ticks() -> int:
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def citus_up() -> bool:
    """Whether 5441 answered before this run (a cluster someone else started)."""
    return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5441"], check=False).returncode == 0


def paycore_of(target: str, args: argparse.Namespace) -> list[str]:
    return [args.baseline] if target == BASELINE else payments.paycore_command()


def database(target: str, args: argparse.Namespace, tag: str) -> tuple[str, str]:
    """(paycore's URL, the name to drop) of a fresh database on `target`, migrated."""
    if target == "postgres":
        name = common.new_postgres_database(args.postgres_url, "citb")
        return common.postgres_database_url(args.postgres_url, name), name
    name = f"citb_{os.getpid()}_{tag.replace('-', '_')}"
    url = subprocess.run(
        [str(common.REPO / "scripts" / "citus"), "up", name], check=True, capture_output=True, text=True
    ).stdout.strip()
    for setting in args.citus_setting:  # e.g. citus.max_adaptive_executor_pool_size=1
        key, _, value = setting.partition("=")
        subprocess.run(
            ["psql", "-q", "-h", "127.0.0.1", "-p", "5441", "-U", "postgres", "-d", name, "-c",
             f"ALTER DATABASE {name} SET {key} = '{value}'"],
            check=True, capture_output=True,
        )  # fmt: skip
    env = {**os.environ, "PAYCORE_DATABASE_URL": url}
    for command in (["db", "upgrade"], ["db", "distribute"]):
        subprocess.run([*paycore_of(target, args), *command], check=True, capture_output=True, env=env)
    return url, name


def drop(target: str, name: str, args: argparse.Namespace) -> None:
    if target == "postgres":
        common.drop_postgres_database(args.postgres_url, name)
        return
    for port in CITUS_PORTS:
        subprocess.run(
            ["psql", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres", "-c",
             f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
            check=False, capture_output=True,
        )  # fmt: skip


def measure(target: str, args: argparse.Namespace, workdir: Path, tag: str) -> list[str]:
    url, name = database(target, args, tag)
    sandbox_name = common.new_postgres_database(args.postgres_url, "citb_sbx")
    sandbox_url = common.postgres_database_url(args.postgres_url, sandbox_name)
    env = {
        **os.environ,
        "PAYCORE_DATABASE_URL": url,
        "PAYCORE_SANDBOX_DATABASE_URL": sandbox_url,
        "PAYCORE_PROCESSOR_TIMEOUT_MS": "2000",
    }
    port = payments.free_port()
    log = workdir / f"serve-{tag}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*paycore_of(target, args), "serve", "--dev", "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir,
        )  # fmt: skip
    deployment = payments.Deployment(target, url, sandbox_url, [port], [process], [log], [sandbox_name])
    try:
        payments.wait_ready(port, process, log)
        account = payments.merchant_account(port, tag)
        busy_before = machine_busy_ticks()
        result: dict[str, Any] = payments.load(deployment, account, args, tag)
        busy_ms = (machine_busy_ticks() - busy_before) * 1000 / TICKS_PER_S
        time.sleep(2)  # let webhooks land before the books are checked
        verdict = checked(deployment, result["count_201"], paycore_of(target, args))
        per_payment = busy_ms / result["count_201"] if result["count_201"] else 0.0
        return [
            target,
            tag,
            common.fmt(result["payments_per_s"]),
            common.fmt(per_payment, 2),
            common.fmt(result["p50_ms"]),
            common.fmt(result["p99_ms"]),
            verdict,
        ]
    finally:
        deployment.stop(args.postgres_url)
        drop(target, name, args)


def checked(deployment: payments.Deployment, count: int, paycore: list[str]) -> str:
    """payments_bench's check, its `paycore ledger verify` run with the target's own code."""
    own = payments.paycore_command
    payments.paycore_command = lambda: paycore  # type: ignore[assignment]
    try:
        return payments.check(deployment, count)
    finally:
        payments.paycore_command = own  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument(
        "--citus-setting", action="append", default=[], help="KEY=VALUE set on the Citus database (repeatable)"
    )
    parser.add_argument("--baseline", help="another checkout's paycore executable: a third target, citus-baseline")
    args = parser.parse_args(argv)
    if args.seconds < 1 or args.repeat < 1 or args.clients < 1:
        parser.error("--seconds, --repeat and --clients >= 1")
    targets = (*TARGETS, BASELINE) if args.baseline else TARGETS
    started_here = not citus_up()
    workdir = Path(tempfile.mkdtemp(prefix="paycore-citusbench-"))
    rows: list[list[str]] = []
    try:
        for repeat in range(1, args.repeat + 1):
            for target in targets if repeat % 2 else tuple(reversed(targets)):
                rows.append(measure(target, args, workdir, f"{target}-r{repeat}"))
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        if started_here:
            subprocess.run([str(common.REPO / "scripts" / "citus"), "down"], check=False, capture_output=True)
    medians = [
        [
            target,
            common.fmt(common.median([float(row[2].replace(",", "")) for row in rows if row[0] == target])),
            common.fmt(common.median([float(row[3].replace(",", "")) for row in rows if row[0] == target]), 2),
        ]
        for target in targets
    ]
    facts = common.machine_facts([("load", f"{args.clients} clients, {args.seconds} s a run, {args.repeat} rounds")])
    print(
        "\n\n".join(
            [
                "## Payments on one PostgreSQL and on Citus (bench/citus_payments_bench.py)",
                f"Command: `{common.command_line()}`",
                common.facts_table(facts),
                common.markdown_table(
                    ["target", "run", "payments/s", "machine CPU ms a payment", "p50 ms", "p99 ms", "check"], rows
                ),
                common.markdown_table(["target", "median payments/s", "median machine CPU ms a payment"], medians),
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
