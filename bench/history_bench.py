"""Cost flat with history (issue 39): the CPU of a payment after 1,000 and after 100,000 payments
of one tenant, side by side, on SQLite and PostgreSQL. Target: the second at most 1.2 times the
first.

    .venv/bin/python bench/history_bench.py                    # both backends: about 6 minutes, 3 GB in /tmp
    .venv/bin/python bench/history_bench.py --backends sqlite --history 20000 --rounds 3   # smoke run

Per backend, two `paycore serve --dev` processes (the API, its worker and the in-process sandbox),
each on a fresh database of its own (payments_bench.deploy): `small` and `large`. Each gets
`--base` (1,000) payments over HTTP. Then the large one's tenant gets a history of `--history`
(100,000) payments: THE BULK IS WRITTEN DIRECTLY, BYPASSING THE SERVICES, as copies of every row
the real payments wrote (tests/support/history.py: payments, their events, ledger transfers and
entries, idempotency keys, processor webhooks; ids and keys suffixed, the same accounts moved).
Its server keeps running meanwhile, with whatever plans its connections made on the small
history. Then rounds alternate small, large, small, large, ...: each posts `--payments` payments
(`--clients` threads, keep-alive connections, new keys, `tok_ok`), waits until the server is
idle again (the sandbox's webhooks to paycore delivered), and takes the CPU the server process
used (/proc/PID/stat, every thread), and on PostgreSQL the CPU of its database's backends, per
201. Each history grows by the rounds' payments (reported).

Two phases (`--phases`), each of `--rounds` rounds per database: `as-left`, the statistics as
the system leaves them (docs/operations.md, "Planner statistics": the migrations' ANALYZE found
empty tables; SQLite's connections run PRAGMA optimize every ten minutes and when they close,
the bulk writer's included; PostgreSQL has what autovacuum does on this server, and with autovacuum off the
worker's `keep_statistics` job, at most once a minute), then
`analyzed`, after ANALYZE of both databases, as an operator runs it after a bulk load. The
report says what statistics `payments` had in each.

Checked: every request of a round is a 201; each database holds as many succeeded payments as
it should; `paycore ledger verify` passes on the small database (the large one's copies are
outside the books, by design).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import payments_bench
import webhooks_bench

sys.path.insert(0, str(common.REPO))  # tests/support/history.py: the same copies as the plan tests

from tests.support.history import add_history

from paycore.config import Settings
from paycore.db.engine import Database

TENANT = "default"  # `serve --dev` serves local mode's tenant
TARGET_RATIO_MAX = 1.2
_IDLE_TICKS_S = 0.02  # a server whose CPU moved by at most this over `_IDLE_PAUSE_S` is idle
_IDLE_PAUSE_S = 0.3
_IDLE_WAIT_S_MAX = 60.0
_COPIES_PER_TRANSACTION = 9


@dataclass
class Server:
    name: str  # small, large
    deployment: payments_bench.Deployment
    account: str
    payments: int = 0  # made through the API so far
    history: int = 0  # the tenant's payments in the database

    @property
    def pid(self) -> int:
        return self.deployment.processes[0].pid

    def backends(self) -> list[int]:
        names = self.deployment.postgres_names[:1]  # paycore's database; the sandbox's is the sandbox's work
        return [pid for name in names for pid in common.postgres_backends(name)]

    def cpu(self) -> tuple[float, float]:
        """(server process, database backends) CPU seconds so far."""
        server = webhooks_bench.cpu_s(self.pid) or 0.0
        return server, sum(webhooks_bench.cpu_snapshot(self.backends()).values())


def log(message: str) -> None:
    print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def post_payments(server: Server, count: int, clients: int, tag: str) -> dict[int, int]:
    """`count` payments from `clients` threads; the statuses answered."""
    numbers = itertools.count()
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    port = server.deployment.ports[0]
    body = payments_bench.payment_body(server.account)

    def client() -> None:
        connection = payments_bench.Client(port)
        while (number := next(numbers)) < count:
            status, _ = connection.call("POST", "/v1/payments", body, {"Idempotency-Key": f"{tag}-{number}"})
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    server.payments += statuses.get(201, 0)
    server.history += statuses.get(201, 0)
    return statuses


def wait_idle(server: Server) -> None:
    """Until the server's CPU (and its backends') stops moving: its sandbox's webhooks are in."""
    deadline = time.monotonic() + _IDLE_WAIT_S_MAX
    last = sum(server.cpu())
    while time.monotonic() < deadline:
        time.sleep(_IDLE_PAUSE_S)
        now = sum(server.cpu())
        if now - last <= _IDLE_TICKS_S:
            return
        last = now
    log(f"{server.name}: still busy after {_IDLE_WAIT_S_MAX:.0f} s; measured as is")


def grow_history(server: Server, target: int) -> float:
    """Copy the tenant's rows until it has `target` payments; seconds taken."""
    copies = target // server.history - 1
    database = Database(Settings(database_url=server.deployment.database_url, db_pool_size=1))
    started = time.perf_counter()
    try:
        for first in range(1, copies + 1, _COPIES_PER_TRANSACTION):
            batch = min(_COPIES_PER_TRANSACTION, copies - first + 1)
            added = add_history(database, TENANT, batch, first=first)
            log(f"{server.name}: copies {first}-{first + batch - 1}: {added.get('payments', 0):,} payments added")
    finally:
        database.dispose()
    server.history *= copies + 1
    return time.perf_counter() - started


def analyze(server: Server) -> None:
    database = Database(Settings(database_url=server.deployment.database_url, db_pool_size=1))
    try:
        with database.engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
    finally:
        database.dispose()


def statistics_state(server: Server) -> str:
    """What statistics the planner has for `payments` at the end."""
    database = Database(Settings(database_url=server.deployment.database_url, db_pool_size=1))
    try:
        with database.engine.connect() as connection:
            if database.is_postgres:
                row = connection.exec_driver_sql(
                    "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables WHERE relname = 'payments'"
                ).one()
                autovacuum = connection.exec_driver_sql("SHOW autovacuum").scalar()
                return f"payments analyzed: {row[0] or row[1] or 'never'} (autovacuum {autovacuum})"
            has = connection.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").scalar()
            stat = "none"
            if has:
                query = "SELECT stat FROM sqlite_stat1 WHERE tbl = 'payments' LIMIT 1"
                found = connection.exec_driver_sql(query).first()
                stat = "none" if found is None else f"sqlite_stat1 counts {found[0].split()[0]} rows"
            return f"payments: {stat}"
    finally:
        database.dispose()


def check(server: Server) -> str:
    database = Database(Settings(database_url=server.deployment.database_url, db_pool_size=1))
    try:
        with database.read() as connection:
            succeeded = connection.exec_driver_sql("SELECT count(*) FROM payments WHERE status = 'succeeded'").scalar()
    finally:
        database.dispose()
    problems = [] if succeeded == server.history else [f"succeeded payments {succeeded} != {server.history}"]
    if server.name == "small":
        verify = subprocess.run(
            [*payments_bench.paycore_command(), "ledger", "verify"],
            env={**os.environ, "PAYCORE_DATABASE_URL": server.deployment.database_url},
            capture_output=True,
            text=True,
            check=False,
        )
        if verify.returncode != 0:
            problems.append("ledger verify FAILED: " + verify.stdout[-300:])
    return "ok" if not problems else "; ".join(problems)


def run_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    servers: list[Server] = []
    try:
        for name in ("small", "large"):
            deployment = payments_bench.deploy(backend, 1, workdir, args, f"{backend}-{name}")
            servers.append(Server(name, deployment, payments_bench.merchant_account(deployment.ports[0], name)))
        for server in servers:
            statuses = post_payments(server, args.base, args.clients, f"base-{server.name}")
            assert statuses == {201: args.base}, statuses
            log(f"{backend} {server.name}: {args.base:,} payments over HTTP")
        large = servers[1]
        grown_s = grow_history(large, args.history)
        log(f"{backend} large: history of {large.history:,} payments written in {grown_s:.0f} s")
        rounds, statistics = [], {}
        for phase in args.phases.split(","):
            if phase == "analyzed":
                for server in servers:
                    analyze(server)
            statistics[phase] = {server.name: statistics_state(server) for server in servers}
            rounds.extend(measure(backend, phase, servers, args))
        return {
            "backend": backend,
            "rounds": rounds,
            "grown_s": grown_s,
            "statistics": statistics,
            "checks": {server.name: check(server) for server in servers},
        }
    finally:
        for server in servers:
            server.deployment.stop(args.postgres_url)


def measure(backend: str, phase: str, servers: list[Server], args: argparse.Namespace) -> list[dict[str, Any]]:
    """`args.rounds` rounds on each server, alternated; each round's CPU per payment."""
    rounds = []
    for number, server in itertools.product(range(1, args.rounds + 1), servers):
        wait_idle(server)
        history = server.history
        before = server.cpu()
        statuses = post_payments(server, args.payments, args.clients, f"{phase}-r{number}-{server.name}")
        wait_idle(server)
        after = server.cpu()
        made = statuses.get(201, 0)
        assert statuses == {201: args.payments}, statuses
        cpu = [(a - b) * 1000 / made for a, b in zip(after, before, strict=True)]
        rounds.append({"phase": phase, "round": number, "server": server.name, "history": history, "payments": made,
                       "server_ms": cpu[0], "backends_ms": cpu[1], "total_ms": cpu[0] + cpu[1]})  # fmt: skip
        log(f"{backend} {phase} round {number} {server.name} (history {history:,}): {sum(cpu):.2f} ms CPU a payment")
    return rounds


def report(results: list[dict[str, Any]], workdir: Path, began: str) -> str:
    rows, summary, notes = [], [], []
    for result in results:
        backend = result["backend"]
        for item in result["rounds"]:
            cpu = [f"{item[key]:.2f}" for key in ("server_ms", "backends_ms", "total_ms")]
            where = [backend, item["phase"], item["round"], item["server"], f"{item['history']:,}"]
            rows.append([*where, item["payments"], *cpu])
        for phase in result["statistics"]:
            summary.append(_summary(backend, phase, [item for item in result["rounds"] if item["phase"] == phase]))
            for name, state in result["statistics"][phase].items():
                notes.append(f"- {backend}, statistics {phase}, {name}: {state}")
        notes.append(f"- {backend}: check {result['checks']}; the large history written in {result['grown_s']:.0f} s")
    return "\n".join([
        "## Cost flat with history (bench/history_bench.py)", "",
        f"{began} UTC. Command: `{common.command_line()}`", "",
        common.facts_table(common.machine_facts([("workdir filesystem", common.filesystem_of(workdir))])), "",
        "Medians of the rounds; CPU per payment = the server process (API, worker, in-process sandbox), plus on"
        " PostgreSQL the backends of paycore's database, over the round and until the server is idle again.", "",
        common.markdown_table(["backend", "statistics", "small: payments of the tenant", "ms CPU a payment",
                               "large: payments of the tenant", "ms CPU a payment", "large / small",
                               "server process only", "target", "verdict"], summary), "",
        common.markdown_table(["backend", "statistics", "round", "database", "history at start", "payments",
                               "server ms", "backends ms", "total ms"], rows), "",
        *notes,
    ])  # fmt: skip


def _summary(backend: str, phase: str, rounds: list[dict[str, Any]]) -> list[Any]:
    medians, spans = {}, {}
    for name in ("small", "large"):
        picked = [item for item in rounds if item["server"] == name]
        medians[name] = {key: common.median([item[key] for item in picked]) for key in ("server_ms", "total_ms")}
        spans[name] = f"{picked[0]['history']:,}-{picked[-1]['history'] + picked[-1]['payments']:,}"
    ratio = common.ratio(medians["large"]["total_ms"], medians["small"]["total_ms"])
    server_ratio = common.ratio(medians["large"]["server_ms"], medians["small"]["server_ms"])
    verdict = "met" if ratio is not None and ratio <= TARGET_RATIO_MAX else "NOT met"
    return [backend, phase, spans["small"], f"{medians['small']['total_ms']:.2f}",
            spans["large"], f"{medians['large']['total_ms']:.2f}",
            f"{ratio:.3f}" if ratio else "-", f"{server_ratio:.3f}" if server_ratio else "-",
            f"<= {TARGET_RATIO_MAX}", verdict]  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--base", type=int, default=1_000, help="payments over HTTP on each database first")
    parser.add_argument("--history", type=int, default=100_000, help="the large database's payments before the rounds")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per database, alternated")
    parser.add_argument("--payments", type=int, default=200, help="payments per round")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--phases",
        default="as-left,analyzed",
        help="as-left: statistics as the system leaves them; analyzed: after ANALYZE of both databases",
    )
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR, help="where the .md/.json results go")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (SQLite files, server logs)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    began = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}"
    workdir = Path(tempfile.mkdtemp(prefix="paycore-history-"))
    try:
        results = [run_backend(backend, args, workdir) for backend in args.backends.split(",")]
        text = report(results, workdir, began)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)  # the SQLite files: about 3 GB
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"history-{began.replace(' ', 'T').replace(':', '')}"
    stem.with_suffix(".md").write_text(text + "\n")
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(text)


if __name__ == "__main__":
    main()
