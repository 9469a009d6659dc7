#!/usr/bin/env python3
"""POST /v1/tenants/{id}/credits requests/s and latency, against two reference servers (issue 2).

Run from the repository root with the project's virtualenv (needs `wrk`: `apt-get install -y wrk`):

    .venv/bin/python bench/credits_http_bench.py --clients 16 --threads 2 --duration-s 10 --repeats 3

Three targets, started one after another in the same run (one server process at a time, on
a free loopback port), all driven by the same load tool with the same settings
(`wrk -t2 -c16 --latency`, keep-alive connections, script bench/wrk/credits.lua):

- `paycore`: `paycore serve` on a fresh database for every repeat (the embedded default:
  a new SQLite file in --workdir; or, with --backend postgres, a fresh `bench_http_*`
  database that is dropped afterwards). Every request is a new credit with its own
  idempotency key, so every 201 is a durably committed ledger transfer.
- `stdlib`: bench/servers/stdlib_credit_server.py, the same API in memory (a dict and a lock)
  on the standard library's ThreadingHTTPServer, served as it serves by default (HTTP/1.0:
  one connection per request).
- `hello`: bench/servers/hello.py, FastAPI's own hello world (GET /) on uvicorn, served the
  way `paycore serve` serves paycore.

Each target gets --warmup-s seconds of unmeasured load (on another tenant) first. After each
credit run the books are checked: the keys still in flight when wrk stopped are re-sent
(an idempotent replay answers for them), and the server's balance must equal the sum of the
acknowledged amounts; for paycore the database is then opened and `paycore.ledger.verify`
must be ok and the credits table must hold exactly the acknowledged credits. Any failed
check makes the exit status non-zero.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _common as common

BENCH = Path(__file__).resolve().parent
LUA_SCRIPT = BENCH / "wrk" / "credits.lua"
TARGETS = ("paycore", "stdlib", "hello")
CREDIT_TARGETS = ("paycore", "stdlib")
DESCRIPTIONS = {
    "paycore": "`paycore serve`, every credit durably committed (idempotency key + ledger transfer)",
    "stdlib": "ThreadingHTTPServer credit server in memory (dict + lock), HTTP/1.0 defaults",
    "hello": "FastAPI hello world (GET /) on uvicorn, served like paycore",
}
_LATENCY_LINE = re.compile(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass
class RunResult:
    target: str
    repeat: int
    backend: str
    duration_s: float = 0.0
    requests: int = 0
    requests_per_s: float = 0.0
    ok: int = 0
    ok_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    socket_errors: dict[str, int] = field(default_factory=dict)
    acknowledged_minor: int = 0
    balance_minor: int | None = None
    replayed: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def paycore_command() -> list[str]:
    script = Path(sys.executable).with_name("paycore")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from paycore.cli.main import main; main()"]


@dataclass
class Server:
    target: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    database_url: str | None = None
    postgres_name: str | None = None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # our own child, by its pid
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_server(
    target: str, repeat: int, args: argparse.Namespace, workdir: Path, postgres_name: str | None
) -> Server:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(common.REPO / "src"), env.get("PYTHONPATH")]))
    database_url = None
    if target == "paycore":
        if postgres_name is None:
            database_url = f"sqlite:///{workdir / f'paycore-r{repeat}.db'}"
        else:
            database_url = common.postgres_database_url(args.postgres_url, postgres_name)
            _migrate(database_url)  # `paycore serve` upgrades SQLite itself, PostgreSQL by hand
        env["PAYCORE_DATABASE_URL"] = database_url
        command = [*paycore_command(), "serve", "--host", "127.0.0.1", "--port", str(port)]
        if args.paycore_dev:
            command.append("--dev")
    elif target == "stdlib":
        command = [sys.executable, str(BENCH / "servers" / "stdlib_credit_server.py"), "--port", str(port)]
    else:
        command = [sys.executable, str(BENCH / "servers" / "hello.py"), "--port", str(port)]
    log_path = workdir / f"{target}-r{repeat}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    server = Server(target, port, process, log_path, database_url, postgres_name)
    ready_path = {"paycore": "/healthz", "stdlib": "/v1/tenants/ready/balance", "hello": "/"}[target]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{target} exited at start-up; see {log_path}:\n{log_path.read_text()[-2000:]}")
        try:
            status, _ = http_call(port, "GET", ready_path)
            if status < 500:
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{target} did not answer within 60 s; see {log_path}")


def _migrate(database_url: str) -> None:
    from paycore.config import Settings
    from paycore.db import migrate
    from paycore.db.engine import Database

    database = Database(Settings(database_url=database_url, db_pool_size=1))
    try:
        migrate.upgrade(database)
    finally:
        database.dispose()


def http_call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")
    finally:
        connection.close()


def credit_body(key: str, amount: int) -> dict[str, Any]:
    """Exactly the body credits.lua sends (the same fingerprint, so a resend is a replay)."""
    return {"idempotency_key": key, "lines": [{"desc": "bench", "amount_minor": amount, "currency": "USD"}]}


# ---------------------------------------------------------------------------- load


def run_wrk(server: Server, args: argparse.Namespace, seconds: int, tenant: str, run_tag: str) -> tuple[str, Any]:
    mode = ["hello"] if server.target == "hello" else ["credit", tenant, run_tag]
    command = [
        args.wrk, f"-t{args.threads}", f"-c{args.clients}", f"-d{seconds}s", "--timeout", "10s", "--latency",
        "-s", str(LUA_SCRIPT), f"http://127.0.0.1:{server.port}", "--", *mode,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()[:2000]}")
    summary = None
    for line in done.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            summary = json.loads(line[len("BENCH_JSON ") :])
    if summary is None:
        raise RuntimeError(f"wrk printed no BENCH_JSON line:\n{done.stdout[-2000:]}")
    return done.stdout, summary


def parse_latency(text: str) -> dict[str, float]:
    """The 'Latency Distribution' block of `wrk --latency`, in milliseconds."""
    found = {}
    for line in text.splitlines():
        match = _LATENCY_LINE.match(line)
        if match:
            found[match.group(1)] = float(match.group(2)) * _UNIT_MS[match.group(3)]
    return found


def measure(target: str, repeat: int, args: argparse.Namespace, workdir: Path) -> RunResult:
    result = RunResult(target, repeat, args.backend if target == "paycore" else "-")
    postgres_name = None
    if target == "paycore" and args.backend == "postgres":
        postgres_name = common.new_postgres_database(args.postgres_url, "http")
    tenant = f"bench-r{repeat}"
    try:
        server = start_server(target, repeat, args, workdir, postgres_name)
        try:
            if args.warmup_s > 0:
                run_wrk(server, args, args.warmup_s, "warmup", f"w{repeat}{secrets.token_hex(2)}")
            output, summary = run_wrk(server, args, int(args.duration_s), tenant, f"m{repeat}{secrets.token_hex(2)}")
            (workdir / f"{target}-r{repeat}.wrk.txt").write_text(output)
            _record_load(result, output, summary)
            if target in CREDIT_TARGETS:
                _check_credits(server, result, summary, tenant)
        finally:
            server.stop()
        if target == "paycore":
            _check_paycore_database(server, result, tenant)
    finally:
        if postgres_name is not None and not args.keep:
            common.drop_postgres_database(args.postgres_url, postgres_name)
    return result


def _record_load(result: RunResult, output: str, summary: dict[str, Any]) -> None:
    result.duration_s = summary["duration_us"] / 1e6
    result.requests = summary["requests"]
    result.requests_per_s = result.requests / result.duration_s
    statuses: dict[str, int] = {}
    for thread in summary["threads"]:
        for code, count in thread["statuses"].items():
            statuses[code] = statuses.get(code, 0) + count
    result.statuses = dict(sorted(statuses.items()))
    good = "200" if result.target == "hello" else "201"
    result.ok = statuses.get(good, 0)
    result.ok_per_s = result.ok / result.duration_s
    result.socket_errors = {name: count for name, count in summary["errors"].items() if count}
    latency = parse_latency(output)
    result.p50_ms = latency.get("50", summary["latency_us"]["p50"] / 1000)
    result.p99_ms = latency.get("99", summary["latency_us"]["p99"] / 1000)
    unexpected = {code: count for code, count in statuses.items() if code != good}
    if unexpected:
        result.notes.append(f"responses other than {good}: {unexpected}")


def _check_credits(server: Server, result: RunResult, summary: dict[str, Any], tenant: str) -> None:
    """Balance == sum of acknowledged credits, once the keys in flight at wrk's stop are settled."""
    acknowledged = sum(thread["sum201"] for thread in summary["threads"])
    path = f"/v1/tenants/{tenant}/credits"
    for thread in summary["threads"]:
        for key, amount in thread["outstanding"]:
            status, body = http_call(server.port, "POST", path, credit_body(key, amount))
            if status in (200, 201) and isinstance(body, dict) and body.get("amount_minor") == amount:
                acknowledged += amount
                result.replayed += 1
            else:
                result.problems.append(f"resending in-flight key {key}: {status} {str(body)[:200]}")
    status, body = http_call(server.port, "GET", f"/v1/tenants/{tenant}/balance")
    result.acknowledged_minor = acknowledged
    if status != 200 or not isinstance(body, dict):
        result.problems.append(f"balance: {status} {str(body)[:200]}")
        return
    result.balance_minor = body.get("amount_minor")
    if result.balance_minor != acknowledged:
        result.problems.append(f"balance {result.balance_minor} != acknowledged credits {acknowledged}")


def _check_paycore_database(server: Server, result: RunResult, tenant: str) -> None:
    from sqlalchemy import text

    from paycore.config import Settings
    from paycore.db.engine import Database
    from paycore.ledger.verify import verify

    assert server.database_url is not None
    database = Database(Settings(database_url=server.database_url, db_pool_size=1))
    try:
        with database.read() as connection:
            report = verify(connection)
            count, total = connection.execute(
                text("SELECT COUNT(*), COALESCE(SUM(amount_minor), 0) FROM credits WHERE tenant_id = :tenant"),
                {"tenant": tenant},
            ).one()
    finally:
        database.dispose()
    if not report.ok:
        result.problems.append("ledger verify: " + "; ".join(report.problems[:5]))
    expected_count = result.ok + result.replayed
    if count != expected_count or total != result.acknowledged_minor:
        result.problems.append(
            f"credits table holds {count} credits / {total} minor, acknowledged {expected_count} / "
            f"{result.acknowledged_minor}"
        )
    if report.ok:
        result.notes.append(f"paycore.ledger.verify ok over {report.transfers} transfers; {count} credits in the table")


# ---------------------------------------------------------------------------- report


def render(results: list[RunResult], facts: list[tuple[str, str]], args: argparse.Namespace) -> str:
    smoke = args.duration_s < 10 or args.repeats < 3
    parts = ["# paycore HTTP benchmark: POST /v1/tenants/{id}/credits", ""]
    if smoke:
        parts += [
            "**SMOKE RUN** (duration < 10 s or fewer than 3 repeats): checks that the benchmark works,"
            " not a measurement. Do not quote these numbers as results.",
            "",
        ]
    parts += [common.facts_table(facts), "", "## Results (medians over repeats)", ""]
    medians: dict[str, float | None] = {}
    rows = []
    for target in args.targets:
        runs = [r for r in results if r.target == target]
        if not runs:
            continue
        medians[target] = common.median([r.ok_per_s for r in runs])
        errors = sum(sum(r.socket_errors.values()) for r in runs)
        good = "200" if target == "hello" else "201"
        other = sum(n for r in runs for code, n in r.statuses.items() if code != good)
        books = "-" if target == "hello" else ("ok" if all(not r.problems for r in runs) else "FAILED")
        rows.append(
            [
                f"`{target}`",
                common.fmt(medians[target]),
                ", ".join(f"{r.ok_per_s:,.0f}" for r in runs),
                common.fmt(common.median([r.requests_per_s for r in runs])),
                common.fmt(common.median([r.p50_ms for r in runs if r.p50_ms is not None]), 2),
                common.fmt(common.median([r.p99_ms for r in runs if r.p99_ms is not None]), 2),
                other,
                errors,
                books,
            ]
        )
    headers = [
        "target", "median 2xx/s", "each repeat", "wrk req/s", "p50 ms", "p99 ms", "other statuses",
        "socket errors", "books",
    ]  # fmt: skip
    parts += [common.markdown_table(headers, rows), ""]
    parts += ["Servers:", ""] + [f"- `{name}`: {text}" for name, text in DESCRIPTIONS.items()] + [""]
    parts += [
        "2xx/s counts 201 Created (credits) or 200 (hello) per second of wrk's run; `wrk req/s` counts every"
        " response. p50/p99 are wrk's --latency figures (median over repeats); wrk starts the clock when it"
        " writes a request, so a new connection's set-up (every request, for HTTP/1.0) is not in them."
        " Socket errors are wrk's connect/read/write/timeout counts.",
        "",
    ]
    paycore = medians.get("paycore")
    target_rows = []
    if "stdlib" in medians:
        value = common.ratio(paycore, medians["stdlib"])
        verdict = "-" if value is None else ("met" if value >= 1.0 else "NOT met")
        target_rows.append(["paycore >= 1.0 x in-memory stdlib server", common.fmt_ratio(value), verdict])
    if "hello" in medians:
        value = common.ratio(paycore, medians["hello"])
        verdict = "-" if value is None else ("met" if value >= 0.5 else "NOT met")
        target_rows.append(["paycore >= 0.5 x framework hello world", common.fmt_ratio(value), verdict])
    if target_rows:
        parts += ["## Targets (issue 2)", "", common.markdown_table(["target", "measured", "verdict"], target_rows)]
        parts.append("")
    parts += ["## Correctness", ""]
    for result in results:
        if result.target == "hello":
            continue
        state = "ok" if not result.problems else "FAILED: " + "; ".join(result.problems[:5])
        parts.append(
            f"- {result.target} r{result.repeat}: {result.ok} credits acknowledged during the run,"
            f" {result.replayed} in-flight keys settled afterwards, balance {result.balance_minor} ="
            f" acknowledged {result.acknowledged_minor}: {state}"
        )
        parts.extend(f"  - {note}" for note in result.notes if note)
    return "\n".join(parts) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite", help="paycore's database")
    parser.add_argument("--clients", type=int, default=16, help="concurrent keep-alive connections (wrk -c)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (wrk -t)")
    parser.add_argument("--duration-s", type=int, default=10, help="measured seconds per run (whole seconds)")
    parser.add_argument("--warmup-s", type=int, default=2, help="unmeasured seconds of load first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--targets", type=lambda text: [t for t in text.split(",") if t], default=list(TARGETS), help=",".join(TARGETS)
    )
    parser.add_argument("--paycore-dev", action="store_true", help="run `paycore serve --dev` (workers in-process)")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL, help="admin URL (libpq form)")
    parser.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    parser.add_argument("--workdir", type=Path, default=None, help="SQLite files and server logs (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep databases, logs and wrk outputs")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR)
    args = parser.parse_args(argv)
    if unknown := [t for t in args.targets if t not in TARGETS]:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    if args.duration_s < 1 or args.warmup_s < 0 or args.repeats < 1 or args.clients < args.threads:
        parser.error("--duration-s >= 1, --warmup-s >= 0, --repeats >= 1, --clients >= --threads")
    if shutil.which(args.wrk) is None:
        parser.error("wrk not found: install it with `apt-get install -y wrk` (Debian package)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="paycore-http-bench-", dir=args.workdir))
    extra = [
        ("workdir (SQLite files, logs)", f"{workdir} — {common.filesystem_of(workdir)}"),
        ("fsync probe in workdir", common.fsync_probe(workdir)),
        ("wrk", common.tool_version([args.wrk, "-v"])),
        ("load", f"wrk -t{args.threads} -c{args.clients} -d{args.duration_s}s --latency -s bench/wrk/credits.lua"),
        ("paycore database", args.backend),
    ]
    if args.backend == "postgres":
        extra += common.postgres_facts(args.postgres_url)
    facts = common.machine_facts(extra)
    results: list[RunResult] = []
    try:
        for repeat in range(1, args.repeats + 1):
            for target in args.targets:
                result = measure(target, repeat, args, workdir)
                results.append(result)
                state = "ok" if not result.problems else "FAILED: " + result.problems[0][:300]
                print(
                    f"[{repeat}/{args.repeats}] {target:8} {result.ok_per_s:9,.1f} 2xx/s  p50 {result.p50_ms:.2f} ms"
                    f"  p99 {result.p99_ms:.2f} ms  {state}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    facts.append(("load average at end (1/5/15 min)", common.load_average()))
    text = render(results, facts, args)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (args.out / f"http-{stamp}.md").write_text(text)
    (args.out / f"http-{stamp}.json").write_text(
        json.dumps({"facts": facts, "results": [asdict(r) for r in results]}, indent=2)
    )
    print(f"(written to {args.out}/http-{stamp}.md and .json)", file=sys.stderr)
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
