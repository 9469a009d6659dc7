#!/usr/bin/env python3
"""Issue 20, point 7: `paycore reconcile --report FILE` over a settlement report of 100,000,
300,000 and 1,000,000 lines, on SQLite and PostgreSQL: lines/s and the process's peak RSS.
Target: 1,000,000 lines under 30 s and under 300 MB on PostgreSQL, cost linear in the lines.

    .venv/bin/python bench/reconcile_bench.py [--db sqlite,postgres] [--lines 100000,300000,1000000] [--repeats 3]

Per size and database: a fresh database migrated by paycore's own `migrate.upgrade` (SQLite: a
file in --workdir; PostgreSQL: `bench_recon_*`, dropped at the end), its fixture (written
unmeasured: bench/_reconcile_fixture.py says what it holds and why most of it is bulk-inserted),
and the day's report file of exactly N lines. Then --repeats rounds, the databases interleaved
within each round: the fixture database is cloned (PostgreSQL `CREATE DATABASE ... TEMPLATE`,
SQLite's backup API), and the real CLI runs on the clone as a user runs it: `paycore reconcile
--report FILE` in its own process, `PAYCORE_DATABASE_URL` set, its standard error a
pseudo-terminal so that the progress bar draws as on a terminal (--no-tty: a file). Measured:

- wall time, from starting the process to its exit (Python's start and paycore's imports
  included: what the user waits for); lines/s is N over it;
- the process's peak RSS (`ru_maxrss` of its own `wait4`), and its RSS sampled every 0.25 s,
  to show whether memory grows during the run (growth from 25% to 90% of the run);
- the process's CPU (user + system) and, when the server runs on this machine, the CPU of the
  PostgreSQL backend serving it (found by its process title, which names the run's database,
  so other work on the same server is not counted): with the wall time, which side is busy
  and how long both wait (round trips, fsync, other work on the machine: the load average at
  the start and end of each run is shown beside it);
- the engine's own time, from its run row (`created_at_us` to `finished_at_us`).

Checked after every run (a run that fails a check is not a figure; the exit status is then 1):
the exit status, one completed run row with lines_read == N and the expected matched, breaks
and resolved counts, the stored breaks by type, every in-doubt object moved as its line says
(none left in doubt), `paycore.ledger.verify` ok, and the CLI's summary line.

--profile cprofile|py-spy runs each configuration once under the profiler instead (not a
figure: the profiler's cost is in it) and writes the profile next to the results; cProfile's
top functions are printed, py-spy's samples summed by engine function and by what the innermost
frame does. py-spy is a local tool (`.venv/bin/pip install py-spy`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import json
import os
import pstats
import pty
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sqlalchemy import text

import _common as common
import _reconcile_fixture as fixture
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.ledger.verify import verify
from paycore.payouts import states as payout_states

PAYCORE: Final = Path(sys.executable).parent / "paycore"  # the installed entry point of this venv
RSS_SAMPLE_S: Final = 0.25
RUN_TIMEOUT_S: Final = 3_600  # one reconcile run; past it the run is killed and reported failed
TARGET_LINES: Final = 1_000_000
TARGET_WALL_S: Final = 30.0
TARGET_RSS_MB: Final = 300.0
TERMINAL_COLUMNS, TERMINAL_ROWS = 120, 40
STDERR_TAIL_BYTES: Final = 4_096
SPY_RATE_HZ: Final = 200  # py-spy samples per second
BACKEND_RESCAN_TICKS: Final = 4  # look for the run's PostgreSQL backends every 4 samples (1 s)


# ---------------------------------------------------------------------------- databases


@dataclass
class Target:
    """One database kind's fixture for one size: where it lives and what its report says."""

    kind: str  # sqlite | postgres
    lines: int
    base: str  # PostgreSQL: database name; SQLite: file path
    report: Path
    setup_s: dict[str, float] = field(default_factory=dict)


def database_url(args: argparse.Namespace, kind: str, name: str) -> str:
    if kind == "postgres":
        return common.postgres_database_url(args.postgres_url, name)
    return f"sqlite:///{name}"


def open_database(url: str) -> Database:
    return Database(Settings(database_url=url, db_pool_size=2, statement_timeout_ms=3_600_000))


def create_base(args: argparse.Namespace, kind: str, lines: int, scratch: Path) -> str:
    if kind == "postgres":
        return common.new_postgres_database(args.postgres_url, "recon")
    return str(scratch / f"recon-{lines}.db")


def clone(args: argparse.Namespace, target: Target, scratch: Path, round_index: int) -> str:
    """A copy of the fixture database for one run (a run changes what it reconciles)."""
    if target.kind == "postgres":
        import psycopg
        from psycopg import sql

        name = f"{target.base}_r{round_index}"
        with psycopg.connect(args.postgres_url, autocommit=True) as connection:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
            connection.execute(statement.format(sql.Identifier(name), sql.Identifier(target.base)))
        return name
    path = scratch / f"recon-{target.lines}-r{round_index}.db"
    with sqlite3.connect(target.base) as source, sqlite3.connect(path) as copy:
        source.backup(copy)
    return str(path)


def remove(args: argparse.Namespace, kind: str, name: str) -> None:
    if kind == "postgres":
        common.drop_postgres_database(args.postgres_url, name)
        return
    for suffix in ("", "-wal", "-shm"):
        Path(name + suffix).unlink(missing_ok=True)


def build(args: argparse.Namespace, kind: str, lines: int, scratch: Path) -> Target:
    """The fixture database and its report; every step timed (not measured: setup)."""
    base = create_base(args, kind, lines, scratch)
    target = Target(kind, lines, base, scratch / f"report-{kind}-{lines}.csv")
    database = open_database(database_url(args, kind, base))
    day = dt_today()
    try:
        with timed(target, "migrate"):
            migrate.upgrade(database)
        with timed(target, "accounts"):
            accounts = fixture.create_accounts(database)
        with timed(target, "bulk insert"):
            fixture.bulk_insert(database, accounts, lines=lines, day=day, day_start_us=fixture.day_start_us(day))
        with timed(target, "in-doubt objects (services)"):
            in_doubt = fixture.make_in_doubt(database, accounts, blocks=lines // fixture.BLOCK_LINES)
        with timed(target, "vacuum analyze" if kind == "postgres" else "nothing (no ANALYZE)"):
            fixture.analyze(database)
    finally:
        database.dispose()
    with timed(target, "report file"):
        fixture.write_report(target.report, lines=lines, day=day, in_doubt=in_doubt)
    assert fixture.first_day(target.report) == day, "the report's first line gives the fixture's day"
    return target


def dt_today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


@contextlib.contextmanager
def timed(target: Target, step: str) -> Iterator[None]:
    began = time.perf_counter()
    yield
    target.setup_s[step] = round(time.perf_counter() - began, 2)
    print(f"  {target.kind} {target.lines:,}: {step} {target.setup_s[step]:.1f} s", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- one measured run


@dataclass
class Run:
    kind: str
    lines: int
    round: int
    wall_s: float
    exit_code: int
    peak_rss_mb: float
    rss_growth_mb: float | None  # RSS at 90% of the run minus RSS at 25%
    cpu_s: float  # the process's user + system
    postgres_backend_cpu_s: float | None  # the backend(s) serving the run
    load_average: str  # at the start, then at the end (1 min)
    engine_s: float | None  # the run row's finished_at_us - created_at_us
    profiled: str | None
    problems: list[str] = field(default_factory=list)
    stdout: str = ""
    stderr_tail: str = ""

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.wall_s


def reconcile(
    args: argparse.Namespace, url: str, report: Path, profile_path: Path | None, database_name: str | None
) -> dict[str, Any]:
    """Run `paycore reconcile --report FILE` once; the wall time, exit, rusage, RSS samples."""
    command = [str(PAYCORE), "reconcile", "--report", str(report)]
    if args.profile == "cprofile":
        command = [sys.executable, "-m", "cProfile", "-o", str(profile_path), *command]
    elif args.profile == "py-spy":
        spy = Path(sys.executable).parent / "py-spy"
        command = [
            str(spy),
            "record",
            "--idle",
            "--rate",
            "200",
            "--format",
            "raw",
            "-o",
            str(profile_path),
            "--",
            *command,
        ]
    environment = {**os.environ, "PAYCORE_DATABASE_URL": url}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(common.REPO / "src"), os.environ.get("PYTHONPATH")]))
    if not args.no_tty and environment.get("TERM", "dumb") in ("dumb", "unknown", ""):
        environment["TERM"] = "xterm-256color"
    with tempfile.TemporaryFile() as stdout, _stderr(args.no_tty) as (stderr, tail):
        began = time.perf_counter()
        process = subprocess.Popen(command, env=environment, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        sampler = _Sampler(process.pid, database_name)
        sampler.start()
        _, status, usage = _wait(process)
        wall_s = time.perf_counter() - began
        sampler.stop()
        stdout.seek(0)
        printed = stdout.read().decode("utf-8", "replace")
    return {
        "wall_s": wall_s,
        "exit_code": os.waitstatus_to_exitcode(status),
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux: KiB
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_growth_mb": sampler.growth_mb(wall_s),
        "postgres_backend_cpu_s": sampler.backend_cpu_s(),
        "stdout": printed,
        "stderr_tail": tail.text(),
    }


def _wait(process: subprocess.Popen[bytes]) -> tuple[int, int, Any]:
    """wait4 on the child: its own rusage (RUSAGE_CHILDREN would mix in every child so far)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid != 0:
            process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            return pid, status, usage
        if time.monotonic() > deadline:
            process.kill()
        time.sleep(0.01)


class _Sampler(threading.Thread):
    """Every RSS_SAMPLE_S: the child's RSS and, on PostgreSQL, the CPU of the server's backends
    serving the run's database (found by their process title, which names the database), so
    that the other work on the same server is not counted."""

    def __init__(self, pid: int, database_name: str | None) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.database_name = database_name
        self.began = time.perf_counter()
        self.samples: list[tuple[float, float]] = []  # (seconds since start, RSS MB)
        self.backend_ticks: dict[int, int] = {}  # backend pid -> its utime + stime, last seen
        self._done = threading.Event()

    def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        ticks = 0
        while not self._done.wait(RSS_SAMPLE_S):
            if self.database_name is not None:
                self._backends(rescan=ticks % BACKEND_RESCAN_TICKS == 0)
            ticks += 1
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.samples.append((time.perf_counter() - self.began, int(line.split()[1]) / 1024))
            except (OSError, ValueError):
                return

    def _backends(self, *, rescan: bool) -> None:
        if rescan:
            for pid in common.postgres_backends(str(self.database_name)):
                self.backend_ticks.setdefault(pid, 0)
        for pid in list(self.backend_ticks):
            cpu = _cpu_ticks(pid)
            if cpu is not None:
                self.backend_ticks[pid] = max(self.backend_ticks[pid], cpu)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def backend_cpu_s(self) -> float | None:
        if self.database_name is None or not self.backend_ticks:
            return None
        return sum(self.backend_ticks.values()) / os.sysconf("SC_CLK_TCK")

    def growth_mb(self, wall_s: float) -> float | None:
        early = [rss for at, rss in self.samples if at >= 0.25 * wall_s]
        late = [rss for at, rss in self.samples if at <= 0.9 * wall_s]
        if not early or not late or wall_s < 4:
            return None
        return round(late[-1] - early[0], 1)


def _cpu_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


class _Tail:
    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[:-STDERR_TAIL_BYTES]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@contextlib.contextmanager
def _stderr(no_tty: bool) -> Iterator[tuple[Any, _Tail]]:
    """The child's standard error: a pseudo-terminal drained by a thread (the progress bar
    draws as on a terminal), or a temporary file; and the tail of what it wrote."""
    tail = _Tail()
    if no_tty:
        with tempfile.TemporaryFile() as file:
            yield file, tail
            file.seek(max(0, file.seek(0, os.SEEK_END) - STDERR_TAIL_BYTES))
            tail.add(file.read())
        return
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", TERMINAL_ROWS, TERMINAL_COLUMNS, 0, 0))

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65_536)
            except OSError:  # EIO: the child closed its end
                return
            if not chunk:
                return
            tail.add(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield follower, tail
    finally:
        os.close(follower)
        reader.join(timeout=5)
        os.close(leader)


# ---------------------------------------------------------------------------- checks


def check(url: str, lines: int, measured: dict[str, Any]) -> tuple[list[str], float | None]:
    """What the run must have done (see the module); (problems, the engine's own seconds)."""
    want = fixture.expected(lines)
    problems: list[str] = []
    if measured["exit_code"] != 0:
        problems.append(f"exit status {measured['exit_code']}: {measured['stderr_tail'][-500:]!r}")
    summary = f"lines read {lines}, matched {want.matched}, resolved {want.resolved}"
    if summary not in measured["stdout"]:
        problems.append(f"the CLI did not print {summary!r}: {measured['stdout']!r}")
    database = open_database(url)
    try:
        with database.read() as connection:
            engine_s = _check_run_row(connection, want, problems)
            _check_breaks(connection, want, problems)
            _check_resolved(connection, want, problems)
            report = verify(connection)
            if not report.ok:
                problems.append(f"ledger verify: {report.problems[:3]}")
    finally:
        database.dispose()
    return problems, engine_s


def _check_run_row(connection: Any, want: fixture.Expected, problems: list[str]) -> float | None:
    query = text(
        "SELECT status, lines_read, matched, breaks_found, resolved, created_at_us, finished_at_us"
        " FROM reconciliation_runs"
    )
    rows = connection.execute(query).all()
    if len(rows) != 1:
        problems.append(f"{len(rows)} run rows, expected 1")
        return None
    row = rows[0]
    found = (row.status, row.lines_read, row.matched, row.breaks_found, row.resolved)
    wanted = ("completed", want.lines, want.matched, sum(want.breaks.values()), want.resolved)
    if found != wanted:
        problems.append(f"run row (status, lines_read, matched, breaks_found, resolved) = {found}, expected {wanted}")
    if row.finished_at_us is None:
        return None
    return float(row.finished_at_us - row.created_at_us) / 1e6


def _check_breaks(connection: Any, want: fixture.Expected, problems: list[str]) -> None:
    query = text("SELECT type, COUNT(*) AS found FROM reconciliation_breaks GROUP BY type")
    stored = {row.type: row.found for row in connection.execute(query)}
    if stored != want.breaks:
        problems.append(f"breaks stored {stored}, expected {want.breaks}")


def _check_resolved(connection: Any, want: fixture.Expected, problems: list[str]) -> None:
    blocks = want.lines // fixture.BLOCK_LINES
    failed = want.payments_failed_by_report
    settled = payout_states.SETTLED
    queries = {
        "payments": ("SELECT status, COUNT(*) FROM payments WHERE idempotency_key LIKE 'doubt-payment-%'"
                     " GROUP BY status", {"succeeded": blocks - failed, "failed": failed}),
        "refunds": ("SELECT status, COUNT(*) FROM refunds WHERE idempotency_key LIKE 'doubt-refund-%'"
                    " GROUP BY status", {"succeeded": blocks}),
        "payouts": ("SELECT status, COUNT(*) FROM payouts WHERE idempotency_key LIKE 'doubt-payout-%'"
                    " GROUP BY status", {settled: blocks}),
    }  # fmt: skip
    for name, (query, wanted) in queries.items():
        found = {status: count for status, count in connection.execute(text(query))}
        if found != {status: count for status, count in wanted.items() if count}:
            problems.append(f"in-doubt {name} after the run: {found}, expected {wanted}")


# ---------------------------------------------------------------------------- the rounds


def measure(args: argparse.Namespace, target: Target, scratch: Path, round_index: int) -> Run:
    name = clone(args, target, scratch, round_index)
    url = database_url(args, target.kind, name)
    profile_path = None
    if args.profile != "none":
        suffix = "prof" if args.profile == "cprofile" else "txt"
        profile_path = args.out / f"reconcile-{target.kind}-{target.lines}-{args.stamp}.{suffix}"
    try:
        load_before = common.load_average().split()[0]
        measured = reconcile(args, url, target.report, profile_path, name if target.kind == "postgres" else None)
        load_after = common.load_average().split()[0]
        problems, engine_s = check(url, target.lines, measured)
    finally:
        if not args.keep:
            remove(args, target.kind, name)
    server_s = measured["postgres_backend_cpu_s"]
    run = Run(
        kind=target.kind,
        lines=target.lines,
        round=round_index,
        wall_s=round(measured["wall_s"], 3),
        exit_code=measured["exit_code"],
        peak_rss_mb=round(measured["peak_rss_mb"], 1),
        rss_growth_mb=measured["rss_growth_mb"],
        cpu_s=round(measured["cpu_s"], 2),
        postgres_backend_cpu_s=None if server_s is None else round(server_s, 2),
        load_average=f"{load_before} → {load_after}",
        engine_s=None if engine_s is None else round(engine_s, 3),
        profiled=args.profile if args.profile != "none" else None,
        problems=problems,
        stdout=measured["stdout"],
        stderr_tail=measured["stderr_tail"][-600:],
    )
    verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
    print(
        f"  {run.kind} {run.lines:,} round {round_index}: {run.wall_s:.1f} s, {run.lines_per_s:,.0f} lines/s, "
        f"peak RSS {run.peak_rss_mb:.0f} MB, CPU {run.cpu_s:.1f} s, PostgreSQL backend CPU {fmt(server_s, 1)} s, "
        f"load {run.load_average}; {verdict}",
        file=sys.stderr,
        flush=True,
    )
    if profile_path is not None and profile_path.exists():
        if args.profile == "cprofile":
            print_profile(profile_path, args.top)
        else:
            print(summarize_samples(profile_path), file=sys.stderr, flush=True)
    return run


def print_profile(path: Path, top: int) -> None:
    for order in ("cumulative", "tottime"):
        print(f"\n### cProfile of {path.name}, by {order}\n\n```", file=sys.stderr)
        stats = pstats.Stats(str(path), stream=sys.stderr)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        print("```", file=sys.stderr, flush=True)


def summarize_samples(path: Path) -> str:
    """py-spy's raw samples (`frame;frame;... count`, idle included) of the main thread, two
    ways: the innermost engine function (`paycore/reconciliation/`) each sample is in, and what
    the innermost frame is doing (waiting for the server, the driver, SQLAlchemy, paycore)."""
    by_function: Counter[str] = Counter()
    by_activity: Counter[str] = Counter()
    other_threads = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames, count = stack.split(";"), int(count_text)
        if frames[0].startswith("Thread._bootstrap"):
            other_threads += count  # the progress bar's refresh thread, asleep nearly always
            continue
        engine = [frame for frame in frames if "paycore/reconciliation/" in frame]
        by_function[engine[-1].split(" (")[0] if engine else "outside the engine: start, imports, CLI"] += count
        by_activity[_activity(frames[-1])] += count
    total = sum(by_function.values()) or 1
    out = [f"\n### py-spy samples of {path.name}: main thread {total / SPY_RATE_HZ:.1f} s ({total} samples)\n"]
    for title, counts in (("innermost engine function", by_function), ("innermost frame", by_activity)):
        rows = [(name, f"{count / SPY_RATE_HZ:.1f}", f"{count / total:.1%}") for name, count in counts.most_common()]
        out += [common.markdown_table([title, "s", "share"], rows), ""]
    out.append(f"Other threads (the progress bar's refresh, mostly asleep): {other_threads} samples.")
    return "\n".join(out)


def _activity(frame: str) -> str:
    if frame.startswith("Connection.wait (psycopg"):
        return "PostgreSQL: waiting for the server's answer"
    if frame.startswith("BaseCursor._send_query") or frame.startswith("BaseCursor._send_prepare"):
        return "PostgreSQL: sending the query (libpq, socket write)"
    if "psycopg" in frame:
        return "psycopg's Python (prepare, adapt, result columns)"
    if "do_execute (sqlalchemy" in frame or "do_commit (sqlalchemy" in frame:
        return "the driver's call (SQLite: the statement itself)"
    if "sqlalchemy" in frame:
        return "SQLAlchemy (statement build, cache key, result rows)"
    if "paycore/" in frame:
        return "paycore's Python"
    return "other (standard library, rich, typer, csv)"


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# ---------------------------------------------------------------------------- the report


def render(runs: list[Run], targets: list[Target], facts: list[tuple[str, str]], args: argparse.Namespace) -> str:
    lines = ["# `paycore reconcile --report FILE`: lines/s and peak RSS (issue 20, point 7)", ""]
    if args.profile != "none":
        lines += [f"**PROFILED RUNS ({args.profile}): the profiler's cost is in every figure. Not a measurement.**", ""]
    elif args.repeats < 3:
        lines += [f"**{args.repeats} repeat(s): quote every run, not a median of three.**", ""]
    lines += [common.facts_table(facts), "", "## Runs", ""]
    header = [
        "database",
        "lines",
        "wall s (each run)",
        "lines/s (median)",
        "peak RSS MB (each run)",
        "RSS growth 25→90% MB",
        "CPU s: process / PostgreSQL backend",
        "engine s (run row)",
        "µs per line: wall / process CPU",
        "load (1 min) at start → end",
        "checks",
    ]
    rows = []
    for kind in args.databases:
        for size in args.sizes:
            group = [run for run in runs if run.kind == kind and run.lines == size]
            if group:
                rows.append(_row(kind, size, group))
    lines += [common.markdown_table(header, rows), ""]
    lines += [*_targets(runs, args), "", "## Fixture setup (not measured)", ""]
    setup_rows = [(t.kind, f"{t.lines:,}", ", ".join(f"{k} {v:.1f}" for k, v in t.setup_s.items())) for t in targets]
    lines += [common.markdown_table(["database", "lines", "seconds per step"], setup_rows), ""]
    lines += [f"Report mix per {args.sizes[0]:,} lines: {fixture.describe(args.sizes[0])}.", ""]
    problems = [(run, problem) for run in runs for problem in run.problems]
    lines += ["## Checks", ""]
    lines += [f"- FAILED {run.kind} {run.lines:,} round {run.round}: {problem}" for run, problem in problems] or [
        "All runs: exit 0, run row and breaks as expected, every in-doubt object resolved, ledger verify ok."
    ]
    lines += ["", f"Load average at the end (1/5/15 min): {common.load_average()}."]
    return "\n".join(lines) + "\n"


def _row(kind: str, size: int, group: list[Run]) -> list[str]:
    wall = statistics.median(run.wall_s for run in group)
    engine = [run.engine_s for run in group if run.engine_s is not None]
    server = [run.postgres_backend_cpu_s for run in group if run.postgres_backend_cpu_s is not None]
    growth = [run.rss_growth_mb for run in group if run.rss_growth_mb is not None]
    return [
        kind,
        f"{size:,}",
        f"**{wall:,.1f}** ({', '.join(f'{run.wall_s:.1f}' for run in group)})",
        f"{size / wall:,.0f}",
        f"**{statistics.median(run.peak_rss_mb for run in group):,.0f}** "
        f"({', '.join(f'{run.peak_rss_mb:.0f}' for run in group)})",
        ", ".join(f"{value:+.0f}" for value in growth) or "-",
        f"{statistics.median(run.cpu_s for run in group):,.1f} / "
        f"{fmt(statistics.median(server) if server else None, 1)}",
        fmt(statistics.median(engine) if engine else None, 1),
        f"{wall / size * 1e6:,.0f} / {statistics.median(run.cpu_s for run in group) / size * 1e6:,.0f}",
        "; ".join(run.load_average for run in group),
        "ok" if not any(run.problems for run in group) else "**FAILED**",
    ]


def _targets(runs: list[Run], args: argparse.Namespace) -> list[str]:
    out = ["## Targets", ""]
    big = [run for run in runs if run.kind == "postgres" and run.lines == TARGET_LINES and not run.problems]
    if big:
        wall = statistics.median(run.wall_s for run in big)
        rss = max(run.peak_rss_mb for run in big)
        out.append(f"- 1,000,000 lines on PostgreSQL under {TARGET_WALL_S:.0f} s: {wall:.1f} s, "
                   f"{'met' if wall < TARGET_WALL_S else 'NOT met'}")  # fmt: skip
        out.append(f"- and under {TARGET_RSS_MB:.0f} MB: peak {rss:.0f} MB (the largest run), "
                   f"{'met' if rss < TARGET_RSS_MB else 'NOT met'}")  # fmt: skip
    else:
        out.append("- 1,000,000 lines on PostgreSQL: not run (or its checks failed).")
    for kind in args.databases:
        per_line = {
            size: statistics.median(run.wall_s for run in runs if run.kind == kind and run.lines == size) / size
            for size in args.sizes
            if any(run.kind == kind and run.lines == size for run in runs)
        }
        if len(per_line) >= 2:
            smallest, largest = min(per_line), max(per_line)
            growth = per_line[largest] / per_line[smallest]
            out.append(f"- linear on {kind}: wall time per line at {largest:,} is {growth:.2f}x that at {smallest:,}")
    return out


# ---------------------------------------------------------------------------- main


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite, postgres or both, comma-separated")
    parser.add_argument("--lines", default="100000,300000,1000000", help="report sizes, multiples of 1,000")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size and database, interleaved")
    parser.add_argument("--no-tty", action="store_true", help="the child's standard error to a file, not a terminal")
    parser.add_argument("--profile", choices=("none", "cprofile", "py-spy"), default="none")
    parser.add_argument("--top", type=int, default=30, help="cProfile: functions printed per order")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--workdir", type=Path, default=None, help="SQLite files and reports (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and report files")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR, help="where the .md/.json results go")
    args = parser.parse_args()
    args.databases = [kind.strip() for kind in args.db.split(",") if kind.strip()]
    args.sizes = [int(size.replace("_", "")) for size in args.lines.split(",")]
    for kind in args.databases:
        if kind not in ("sqlite", "postgres"):
            parser.error(f"--db: {kind!r} is not sqlite or postgres")
    for size in args.sizes:
        if size <= 0 or size % fixture.BLOCK_LINES or size > fixture.LINES_MAX:
            parser.error(f"--lines: {size} is not a multiple of {fixture.BLOCK_LINES:,} up to {fixture.LINES_MAX:,}")
    if args.repeats < 1 or (args.profile != "none" and args.repeats != 1):
        args.repeats = 1 if args.profile != "none" else parser.error("--repeats must be at least 1")
    args.stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return args


def main() -> int:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    extra = common.postgres_facts(args.postgres_url) if "postgres" in args.databases else []
    facts = common.machine_facts([*extra, ("paycore commit", _commit()), ("progress bar", _bar(args))])
    scratch = Path(tempfile.mkdtemp(prefix="paycore-reconbench-", dir=args.workdir))
    facts.append(("SQLite file and report filesystem", common.filesystem_of(scratch)))
    runs: list[Run] = []
    targets: list[Target] = []
    try:
        for size in args.sizes:
            built = [build(args, kind, size, scratch) for kind in args.databases]
            targets += built
            try:
                for round_index in range(1, args.repeats + 1):
                    runs += [measure(args, target, scratch, round_index) for target in built]
            finally:
                if not args.keep:
                    for target in built:
                        remove(args, target.kind, target.base)
                        target.report.unlink(missing_ok=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    report = render(runs, targets, facts, args)
    print(report)
    (args.out / f"reconcile-{args.stamp}.md").write_text(report)
    dump = {"facts": facts, "targets": [asdict(t) | {"report": str(t.report)} for t in targets]}
    dump["runs"] = [asdict(run) | {"lines_per_s": round(run.lines_per_s, 1)} for run in runs]
    (args.out / f"reconcile-{args.stamp}.json").write_text(json.dumps(dump, indent=2))
    print(f"(written to {args.out}/reconcile-{args.stamp}.md and .json)", file=sys.stderr)
    return 1 if any(run.problems for run in runs) else 0


def _commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(common.REPO), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def _bar(args: argparse.Namespace) -> str:
    if args.no_tty:
        return "off: the child's standard error is a file (--no-tty)"
    return f"on: the child's standard error is a pseudo-terminal ({TERMINAL_COLUMNS}x{TERMINAL_ROWS}), drained"


if __name__ == "__main__":
    sys.exit(main())
