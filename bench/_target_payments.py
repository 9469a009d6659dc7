"""bench/run's payment rows (bench/targets.py): payments over HTTP against the reference server,
CPU per payment by process accounting (the API process on SQLite; every process of a PostgreSQL
split deployment), what a second API process or worker adds, and cost flat with a tenant's
history. Each function adds its rows to the report's table."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _common as common
import _peers as peers
from _targets_table import Table

TENANT = "bench"
# Issue 39's targets (docs/adr/0026-the-money-path-as-a-data-plane.md).
PAYMENTS_RATIO_MIN = 0.20  # payments/s over HTTP, `serve --dev` on SQLite, against the reference server
API_CPU_MS_MAX = 1.5  # CPU a payment in the API process on SQLite, the sandbox's own work apart
SPLIT_CPU_MS_MAX = 6.0  # CPU a payment summed over every process of a PostgreSQL split deployment
HISTORY_RATIO_MAX = 1.2  # a payment after 100,000 of the tenant's against after 1,000
SPLITS = (("a", 1, 1), ("b", 2, 1), ("c", 1, 2))  # (label, API processes, workers), alternated in each round


def _payer(payments_bench: Any, port: int, tag: str) -> Any:
    account = payments_bench.merchant_account(port, tag)

    def pay(client: Any, key: str) -> int:
        body = payments_bench.payment_body(account)
        return int(client.call("POST", "/v1/payments", body, {"Idempotency-Key": key})[0])

    return pay


# ---------------------------------------------------------------------------- payments over HTTP, serve --dev


def payments(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    import payments_bench

    peers.require(peers.REFERENCE_SERVER, "the reference HTTP server")  # skip before paycore starts
    options = SimpleNamespace(postgres_url=args.postgres_url)
    ours: list[float] = []
    theirs: list[float] = []
    for round_index in range(1, size["rounds"] + 1):
        tag = f"pay-r{round_index}"
        deployment = payments_bench.deploy("sqlite", 1, workdir, options, tag)  # type: ignore[arg-type]
        try:
            pay = _payer(payments_bench, deployment.ports[0], tag)
            found = payments_bench.drive(deployment.ports, args.clients, size["pay_s"], pay, tag)
            time.sleep(2)  # webhooks land before the books are checked
            verdict = payments_bench.check(deployment, found["count_201"])
        finally:
            deployment.stop(args.postgres_url)
        if verdict != "ok":
            table.problems.append(f"payments round {round_index}: {verdict}")
        ours.append(found["payments_per_s"])
        theirs.append(reference_round(args, size, workdir, round_index))
        print(f"   round {round_index}: paycore {ours[-1]:,.0f}/s, reference {theirs[-1]:,.0f}/s", file=sys.stderr)
    ratio = common.ratio(common.median(ours), common.median(theirs))
    table.add(
        "payments/s over HTTP, `serve --dev`, SQLite, vs reference stdlib server",
        common.median(ours),
        common.median(theirs),
        f">= {PAYMENTS_RATIO_MIN:.2f}x",
        None if ratio is None else ratio >= PAYMENTS_RATIO_MIN,
    )


def reference_round(args: argparse.Namespace, size: dict[str, Any], workdir: Path, round_index: int) -> float:
    import payments_bench

    process, port = peers.start_reference(workdir / f"reference-{round_index}.log")
    try:

        def credit(client: Any, key: str) -> int:
            path = f"/v1/tenants/{TENANT}/credits"
            return int(client.call("POST", path, {"amount": 1000}, {"Idempotency-Key": key})[0])

        found = payments_bench.drive([port], args.clients, size["pay_s"], credit, f"ref-r{round_index}")
    finally:
        peers.stop(process)
    return float(found["payments_per_s"])


# ---------------------------------------------------------------------------- split deployments: rate and CPU


def split_round(
    args: argparse.Namespace, backend: str, apis: int, workers: int, size: dict[str, Any], workdir: Path, tag: str
) -> dict[str, Any]:
    """One deployment of separate services (_split_deploy), a warm-up, then a window of payments
    with each group's CPU (/proc): returns the window's figures, CPU per payment by group (ms),
    and the books' verdict."""
    import _split_deploy as split
    import payments_bench

    deployment = split.deploy(args.postgres_url, apis, workers, workdir, tag, backend=backend)
    try:
        pay = _payer(payments_bench, deployment.ports[0], tag)
        warm = payments_bench.drive(deployment.ports, args.clients, size["warmup_s"], pay, f"{tag}-warm")
        window = split.CpuWindow(split.deployment_groups(deployment, apis))
        window.start()
        found = payments_bench.drive(deployment.ports, args.clients, size["pay_s"], pay, tag)
        cpu = window.stop()
        time.sleep(2)  # the sandbox's webhooks land before the books are checked
        verdict = payments_bench.check(deployment, warm["count_201"] + found["count_201"])
    finally:
        deployment.stop(args.postgres_url)
    made = max(1, found["count_201"])
    groups = ("sandbox", "api", "workers", "postgres")
    per_payment_ms = {group: cpu[group] * 1000 / made for group in groups}
    line = (
        f"{backend}, {apis} API + {workers} worker(s): {found['payments_per_s']:,.0f}/s, statuses "
        f"{found['statuses']}, p99 {found['p99_ms']:,.0f} ms; ms CPU a payment: "
        + ", ".join(f"{group} {value:.2f}" for group, value in per_payment_ms.items())
        + f"; {split.cpu_note(cpu)}"
    )
    return {"found": found, "per_payment_ms": per_payment_ms, "verdict": verdict, "line": line}


def payments_cpu(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    """CPU a payment in the API process on SQLite, the sandbox its own service (so its work is
    apart), 1 API process + 1 worker; process accounting over the window."""
    api_ms: list[float] = []
    for round_index in range(1, size["rounds"] + 1):
        result = split_round(args, "sqlite", 1, 1, size, workdir, f"cpu-r{round_index}")
        if result["verdict"] != "ok":
            table.problems.append(f"payments-cpu round {round_index}: {result['verdict']}")
        api_ms.append(result["per_payment_ms"]["api"])
        table.notes.append(f"payments-cpu round {round_index}: {result['line']}")
        print(f"   round {round_index}: {result['line']}", file=sys.stderr, flush=True)
    median = common.median(api_ms)
    table.add(
        "ms CPU a payment, the API process, SQLite (sandbox and worker their own processes)",
        median,
        None,
        f"<= {API_CPU_MS_MAX}",
        None if median is None else median <= API_CPU_MS_MAX,
        digits=2,
    )


def payments_pg(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    """Payments/s over HTTP on PostgreSQL with paycore split into its services: (a) 1 API
    process + 1 worker, (b) 2 API + 1 worker, (c) 1 API + 2 workers; the CPU a payment summed
    over every process of (a); what the second API process and the second worker each add."""
    rates: dict[str, list[float]] = {label: [] for label, _, _ in SPLITS}
    summed_ms: list[float] = []
    load_at_start = common.load_average()
    for round_index in range(1, size["rounds"] + 1):
        for label, apis, workers in SPLITS:
            result = split_round(args, "postgres", apis, workers, size, workdir, f"pg{label}-r{round_index}")
            if result["verdict"] != "ok":
                table.problems.append(f"payments-pg round {round_index} ({label}): {result['verdict']}")
            rates[label].append(result["found"]["payments_per_s"])
            if label == "a":
                summed_ms.append(sum(result["per_payment_ms"].values()))
            table.notes.append(f"payments-pg round {round_index}, ({label}) {result['line']}")
            print(f"   round {round_index}, ({label}) {result['line']}", file=sys.stderr, flush=True)
    summed = common.median(summed_ms)
    table.add(
        "ms CPU a payment, every process (API, worker, sandbox, PostgreSQL backends), PostgreSQL, (a)",
        summed,
        None,
        f"<= {SPLIT_CPU_MS_MAX}",
        None if summed is None else summed <= SPLIT_CPU_MS_MAX,
        digits=2,
    )
    _processes_added(rates, table, size, args)
    table.notes.append(
        f"payments-pg bounds: os.cpu_count() = {os.cpu_count()}, load average {load_at_start} at start and "
        f"{common.load_average()} at end; the client threads, the API processes, the worker(s), the sandbox "
        "processor and PostgreSQL share these cores, so a second process can add no more than the idle CPU "
        "there is. A payment completes inside its API request (the processor is called synchronously; a worker "
        "only resolves in-doubt payments, delivers webhooks and runs the periodic jobs), so a second worker has "
        "no payment work to take on this path"
    )


def _processes_added(rates: dict[str, list[float]], table: Table, size: dict[str, Any], args: Any) -> None:
    first = common.median(rates["a"])
    table.add("payments/s over HTTP, PostgreSQL, (a) 1 API process + 1 worker", first, None, "-", None)
    added = {}
    for label, what in (("b", "(b) 2 API processes + 1 worker"), ("c", "(c) 1 API process + 2 workers")):
        mine = common.median(rates[label])
        added[label] = None if mine is None or not first else (mine - first) / first
        table.add(
            f"payments/s over HTTP, PostgreSQL, {what}, vs (a)",
            mine,
            first,
            ">= 1.60x (adds >= 0.6x of (a))",
            None if added[label] is None else added[label] >= 0.6,
        )
    shown = {label: "-" if value is None else f"{value:+.2f}" for label, value in added.items()}
    table.notes.append(
        f"payments-pg: added by a second API process (b-a)/a = {shown['b']}, by a second worker (c-a)/a = "
        f"{shown['c']} (target >= +0.60 each); medians of {size['rounds']} round(s) (a, b, c alternated), each "
        f"{size['pay_s']} s after {size['warmup_s']} s of warm-up, {args.clients} client threads round-robin over "
        f"the API processes; sandbox processor its own service (`paycore processor serve`, PostgreSQL)"
    )


# ---------------------------------------------------------------------------- cost flat with history


def history(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    """history_bench's rounds (statistics as the system leaves them) on each database: CPU a
    payment after `history` payments of one tenant against after `base`."""
    import history_bench

    options = SimpleNamespace(
        base=size["history_base"],
        history=size["history"],
        rounds=size["history_rounds"],
        payments=size["history_payments"],
        clients=4,
        phases="as-left",
        postgres_url=args.postgres_url,
    )
    for backend in ("sqlite", "postgres"):
        result = history_bench.run_backend(backend, options, workdir)  # type: ignore[arg-type]
        problems = [f"{name}: {verdict}" for name, verdict in result["checks"].items() if verdict != "ok"]
        table.problems += [f"history {backend} {problem}" for problem in problems]
        medians = {
            name: common.median([item["total_ms"] for item in result["rounds"] if item["server"] == name])
            for name in ("small", "large")
        }
        ratio = common.ratio(medians["large"], medians["small"])
        table.add(
            f"ms CPU a payment after {size['history']:,} payments of one tenant vs after "
            f"{size['history_base']:,}, {backend}",
            medians["large"],
            medians["small"],
            f"<= {HISTORY_RATIO_MAX}x",
            None if ratio is None else ratio <= HISTORY_RATIO_MAX,
            digits=2,
        )
