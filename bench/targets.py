#!/usr/bin/env python3
"""The project's performance targets side by side with their peers, in one run: `bench/run [--quick]`.

Issue 39's targets (docs/adr/0026-the-money-path-as-a-data-plane.md):
1. `payments`: payments over HTTP, `paycore serve --dev` on SQLite, against the reference stdlib
   server, the same client (payments_bench.drive: 8 threads, keep-alive http.client, a fresh
   Idempotency-Key per request), alternated in rounds; the ratio of medians (>= 0.20x);
2. `payments-cpu`: CPU a payment in the API process on SQLite by process accounting, the
   sandbox and the worker their own processes (_split_deploy on SQLite) (<= 1.5 ms);
3. `payments-pg`: paycore split into its services on PostgreSQL (_split_deploy: (a) 1 API
   process + 1 worker, (b) 2 API + 1 worker, (c) 1 API + 2 workers, alternated in rounds): CPU a
   payment summed over every process of (a), PostgreSQL's backends included (<= 6 ms), and what
   a second API process and a second worker each add;
4. `history`: CPU a payment after 100,000 payments of one tenant against after 1,000, on both
   databases (history_bench, statistics as the system leaves them) (<= 1.2x);
5. `ledger`: paycore's transfer (ledger_bench's `spread` and `hot`) at 1 and 4 client processes
   against pgledger in a scratch database (>= 1.0x), and `create_batch` of 100 and 8,000
   transfers against TigerBeetle's batched rate at the same batch size (>= 0.25x).

Issue 31's, still run: `reconcile` of an N-line report on SQLite and PostgreSQL
(reconcile_bench), `webhooks` (deliveries/s and p99 through one worker, webhooks_bench) and
`webhooks-busy` (the same while payments run, _webhooks_busy).

Prints one table: figure, paycore, peer, ratio, target, verdict. A `--quick` run is a smoke run:
its verdicts are `smoke` (sizes too small to judge a target), never `met`. Exit status 1 when a
correctness check failed (books, ledger verify, a peer's own count); a missed target is a result.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import _peers as peers
from _target_payments import history, payments, payments_cpu, payments_pg
from _targets_table import Table, section

FULL = {
    "rounds": 3,
    "pay_s": 6,
    "ledger_s": 10,
    "warmup_s": 1.0,
    "batch_s": 10,
    "lines": 1_000_000,
    "batches": (100, 8000),
}
FULL |= {"events": 2000, "latency_s": 10}
FULL |= {"history_base": 1000, "history": 100_000, "history_rounds": 5, "history_payments": 200}
QUICK = {"rounds": 1, "pay_s": 3, "ledger_s": 2, "warmup_s": 0.5, "batch_s": 3, "lines": 2000, "batches": (100, 1000)}
QUICK |= {"events": 300, "latency_s": 3}
QUICK |= {"history_base": 100, "history": 2000, "history_rounds": 1, "history_payments": 50}
TENANT = "bench"


# ---------------------------------------------------------------------------- 2. ledger


def ledger(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    import ledger_bench
    from paycore.config import Settings
    from paycore.db.engine import Database

    target = ledger_bench._prepare_target("postgres", workdir, args.postgres_url)
    database = Database(Settings(database_url=target.database_url, db_pool_size=2))
    try:
        section("ledger vs pgledger", table, lambda: against_pgledger(args, size, table, database, target))
        batches(args, size, workdir, table, database)
        _verify(database, table)
    finally:
        database.dispose()
        if target.postgres_name:
            common.drop_postgres_database(args.postgres_url, target.postgres_name)


def against_pgledger(args: argparse.Namespace, size: dict[str, Any], table: Table, database: Any, target: Any) -> None:
    """paycore's transfer (ledger_bench's `spread`, `hot`) and pgledger's, alternated per round."""
    import ledger_bench

    pgledger_name = peers.load_pgledger(args.postgres_url)
    pgledger_url = common.postgres_libpq_url(args.postgres_url, pgledger_name)
    options = SimpleNamespace(duration_s=size["ledger_s"], warmup_s=size["warmup_s"])
    configurations = [("spread", 1), ("spread", 4), ("hot", 4)]
    ours: dict[tuple[str, int], list[float]] = {c: [] for c in configurations}
    theirs: dict[tuple[str, int], list[float]] = {c: [] for c in configurations}
    try:
        for round_index in range(1, size["rounds"] + 1):
            for scenario, clients in configurations:
                run = ledger_bench._run_once(target, scenario, clients, round_index, options, database)  # type: ignore[arg-type]
                table.problems += [f"ledger {scenario} c={clients}: {p}" for p in run.check_problems]
                ours[(scenario, clients)].append(run.per_second)
                peer = peers.run_pgledger(pgledger_url, clients, scenario == "hot", size["warmup_s"], size["ledger_s"])
                table.problems += [f"pgledger {scenario} c={clients}: {p}" for p in peer["problems"]]
                theirs[(scenario, clients)].append(peer["per_s"])
                print(
                    f"   {scenario} c={clients}: paycore {run.per_second:,.0f}/s, pgledger {peer['per_s']:,.0f}/s",
                    file=sys.stderr,
                )
    finally:
        common.drop_postgres_database(args.postgres_url, pgledger_name)
    for scenario, clients in configurations:
        mine, peer_median = common.median(ours[(scenario, clients)]), common.median(theirs[(scenario, clients)])
        ratio = common.ratio(mine, peer_median)
        what = "one hot account" if scenario == "hot" else "own accounts"
        table.add(
            f"ledger transfers/s, PostgreSQL, {clients} client(s), {what}, vs pgledger",
            mine,
            peer_median,
            ">= 1.00x",
            None if ratio is None else ratio >= 1.0,
        )


def paycore_batch_rate(database: Any, batch: int, duration_s: float) -> float:
    """Transfers/s of `ledger.create_batch` of `batch` transfers, one transaction per batch."""
    import ledger_bench
    from paycore.kit.clock import now_us
    from paycore.ledger import service as ledger_service

    source, destination = ledger_bench._prepare_accounts(database, "spread", 1, f"b{batch}-{time.time_ns()}")[0]
    entries = (
        ledger_service.EntrySpec(source, "debit", ledger_bench.AMOUNT_MINOR),
        ledger_service.EntrySpec(destination, "credit", ledger_bench.AMOUNT_MINOR),
    )
    specs = [ledger_service.TransferSpec(entries, currency=ledger_bench.CURRENCY)] * batch

    def one(connection: Any) -> None:
        _, created = ledger_service.create_batch(connection, TENANT, specs, now_us=now_us(), idempotency_key=None)
        assert len(created) == batch

    warm = [specs[0]]
    database.transaction(
        lambda connection: ledger_service.create_batch(connection, TENANT, warm, now_us=now_us(), idempotency_key=None)
    )
    done, started = 0, time.perf_counter()
    while done == 0 or (time.perf_counter() - started < duration_s and done < 10_000):
        database.transaction(one)
        done += 1
    return done * batch / (time.perf_counter() - started)


def batches(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table, database: Any) -> None:
    def body() -> None:
        server = peers.start_tigerbeetle(workdir, workdir / "tigerbeetle.log")
        try:
            for batch in size["batches"]:  # --quick: 1,000, not 8,000 (a paycore batch of 8,000: 6-9 s here)
                ours, theirs = [], []
                for _ in range(size["rounds"]):
                    ours.append(paycore_batch_rate(database, batch, size["batch_s"]))
                    found = peers.run_tigerbeetle(server, batch, size["batch_s"])
                    table.problems += [f"TigerBeetle batch {batch}: {p}" for p in found["problems"]]
                    theirs.append(found["per_s"] or 0.0)
                    print(
                        f"   batch {batch}: paycore {ours[-1]:,.0f}/s, TigerBeetle {theirs[-1]:,.0f}/s", file=sys.stderr
                    )
                ratio = common.ratio(common.median(ours), common.median(theirs))
                table.add(
                    f"ledger create_batch of {batch:,}, PostgreSQL, transfers/s, vs TigerBeetle",
                    common.median(ours),
                    common.median(theirs),
                    ">= 0.25x",
                    None if ratio is None else ratio >= 0.25,
                )
        finally:
            server.stop()

    section("ledger batches vs TigerBeetle", table, body)


def _verify(database: Any, table: Table) -> None:
    from paycore.ledger.verify import verify

    with database.read() as connection:
        report = verify(connection)
    table.notes.append(f"ledger (PostgreSQL): paycore.ledger.verify over {report.transfers} transfers: {report.ok}")
    if not report.ok:
        table.problems.append("ledger verify failed: " + "; ".join(report.problems[:3]))


# ---------------------------------------------------------------------------- 3. reconcile, 4. webhooks


def reconcile(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    import reconcile_bench

    options = SimpleNamespace(
        postgres_url=args.postgres_url, profile="none", no_tty=False, keep=False, top=30, out=workdir, stamp="i31"
    )
    limits = {"sqlite": 20.0, "postgres": 30.0}
    built = [reconcile_bench.build(options, kind, size["lines"], workdir) for kind in limits]  # type: ignore[arg-type]
    runs: dict[str, list[Any]] = {kind: [] for kind in limits}
    try:
        for round_index in range(1, size["rounds"] + 1):
            for target in built:  # the databases interleaved in each round
                run = reconcile_bench.measure(options, target, workdir, round_index)  # type: ignore[arg-type]
                table.problems += [f"reconcile {target.kind}: {p}" for p in run.problems]
                runs[target.kind].append(run)
    finally:
        for target in built:
            reconcile_bench.remove(options, target.kind, target.base)  # type: ignore[arg-type]
    for kind, limit in limits.items():
        wall = common.median([run.wall_s for run in runs[kind]])
        rss = common.median([run.peak_rss_mb for run in runs[kind]])
        full = size["lines"] >= 1_000_000
        lines = f"{size['lines']:,} lines"
        table.add(
            f"reconcile {lines}, {kind}, wall s", wall, None, f"< {limit:.0f} s at 1M", full and (wall or 0) < limit, 1
        )
        table.add(f"reconcile {lines}, {kind}, peak RSS MB", rss, None, "< 300 MB at 1M", full and (rss or 0) < 300)


def webhooks(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    import webhooks_bench

    options = SimpleNamespace(
        postgres_url=args.postgres_url, events=size["events"], tenants=4, concurrency=4, poll_ms=250,
        rate=50.0, latency_s=size["latency_s"],
    )  # fmt: skip
    receiver = webhooks_bench.Receiver()
    rates, p99s = [], []
    try:
        for _ in range(size["rounds"]):
            found = webhooks_bench.run_throughput(options, 1, receiver, workdir)  # type: ignore[arg-type]
            rates.append(found["steady_per_s"])
            latency = webhooks_bench.run_latency(options, 1, receiver, workdir)  # type: ignore[arg-type]
            p99s.append(latency["p99_ms"])
            if found["duplicates"] or latency["duplicates"]:
                table.notes.append(f"webhooks: duplicates {found['duplicates']} / {latency['duplicates']} (retries)")
    finally:
        receiver.close()
    rate, p99 = common.median(rates), common.median(p99s)
    table.add("webhook deliveries/s, 1 worker, PostgreSQL, alone", rate, None, ">= 600/s", (rate or 0) >= 600)
    table.add("webhook latency p99 ms at 50 events/s, alone", p99, None, "< 300 ms", (p99 or 1e9) < 300)
    table.notes.append(
        "webhooks `alone`: no payments run meanwhile and the worker's other jobs sleep; `webhooks-busy` measures "
        "them while payments run (the issue's condition)"
    )


def webhooks_busy(args: argparse.Namespace, size: dict[str, Any], workdir: Path, table: Table) -> None:
    """Issue 31, point 4 as stated: deliveries/s and p99 while payments run (_webhooks_busy)."""
    import _webhooks_busy as busy
    import webhooks_bench

    receiver = webhooks_bench.Receiver()
    runs = []
    try:
        for round_index in range(1, size["rounds"] + 1):
            found = busy.run_round(args.postgres_url, args.clients, size, workdir, receiver, f"whb-r{round_index}")
            runs.append(found)
            table.problems += [f"webhooks-busy round {round_index}: {p}" for p in found["problems"]]
            line = (
                f"round {round_index}: {found['per_s']:,.0f} deliveries/s ({found['payment_share']:.0%} of them "
                f"payment events; payout events alone {found['payout_per_s']:,.0f}/s), latency p50 "
                f"{found['p50_ms']:,.0f} / p99 {found['p99_ms']:,.0f} ms over {found['latency_events']} events "
                f"(payout events' p99 {found['payout_p99_ms']:,.0f} ms, payment events' "
                f"{found['payment_p99_ms']:,.0f} ms; event maker behind by "
                f"{found['behind_s']:.2f} s), payments meanwhile {found['payments_per_s']:,.0f}/s "
                f"{found['statuses']}, {found['delivered']} deliveries all delivered, "
                f"{found['duplicates']} received twice; during the drain: {found['cpu']}"
            )
            table.notes.append(f"webhooks-busy {line}")
            print(f"   {line}", file=sys.stderr, flush=True)
    finally:
        receiver.close()
    rate, p99 = common.median([r["per_s"] for r in runs]), common.median([r["p99_ms"] for r in runs])
    payments_rate = common.median([r["payments_per_s"] for r in runs])
    what = f"while payments run ({common.fmt(payments_rate)}/s), 1 API + 1 worker, PostgreSQL"
    table.add(f"webhook deliveries/s {what}", rate, None, ">= 600/s", (rate or 0) >= 600)
    table.add(f"webhook latency p99 ms at 50 events/s {what}", p99, None, "< 300 ms", (p99 or 1e9) < 300)
    table.notes.append(
        "webhooks-busy: the payout events go to four tenants' endpoints, the payments' events (two a payment) all "
        "to the one endpoint of tenant `default`, and an endpoint is served by one delivery thread at a time: "
        "compare the payout events' p99 with the payment events' in the notes above before blaming the worker"
    )


# ---------------------------------------------------------------------------- main


def render(table: Table, facts: list[tuple[str, str]], args: argparse.Namespace) -> str:
    parts = ["# paycore beside its peers and targets (bench/run)", ""]
    if table.smoke:
        parts += ["**SMOKE RUN** (`--quick`): checks that the run works; the numbers are not measurements.", ""]
    parts += [common.facts_table(facts), ""]
    headers = ["figure", "paycore", "peer", "ratio", "target", "verdict"]
    parts += [common.markdown_table(headers, table.rows), ""]
    parts += [f"- {note}" for note in table.notes]
    parts += [f"- PROBLEM: {problem}" for problem in table.problems] or ["- correctness checks: all ok"]
    return "\n".join(parts) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every benchmark small: a smoke run of a few minutes")
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help="which benchmarks, comma-separated",
    )
    parser.add_argument("--clients", type=int, default=8, help="HTTP client threads (payments)")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL, help="admin URL (libpq form)")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR, help="where the report is written")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = QUICK if args.quick else FULL
    table = Table(smoke=args.quick)
    cache = Path.home() / ".cache"
    cache.mkdir(parents=True, exist_ok=True)  # absent on a fresh machine: mkdtemp does not make parents
    workdir = Path(tempfile.mkdtemp(prefix="targets-bench-", dir=cache))
    facts = common.machine_facts(
        [("workdir", f"{workdir} — {common.filesystem_of(workdir)}"), ("peers", str(peers.PEERS))]
    )
    facts += common.postgres_facts(args.postgres_url)
    try:
        for name in args.only.split(","):
            run = BENCHMARKS[name.strip()]
            section(name, table, lambda run=run: run(args, size, workdir, table))  # type: ignore[misc]
    finally:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    facts.append(("load average at end (1/5/15 min)", common.load_average()))
    text = render(table, facts, args)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"targets-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md").write_text(text)
    return 1 if table.problems else 0


BENCHMARKS = {
    "payments": payments,
    "payments-cpu": payments_cpu,
    "payments-pg": payments_pg,
    "history": history,
    "ledger": ledger,
    "reconcile": reconcile,
    "webhooks": webhooks,
    "webhooks-busy": webhooks_busy,
}

if __name__ == "__main__":
    sys.exit(main())
