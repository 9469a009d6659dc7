"""Issue 29 item 4, with real OS processes: `paycore reconcile` killed with SIGKILL half-way
through a large report leaves no run `running` forever and never half a day's breaks.

The first process reconciles a report of 30,000 lines (a charge paycore never made every 250
lines: 120 `missing_in_paycore`, spread over 60 chunks) with a lease of two seconds. Once it has
written some of its breaks, and before it ends, it is killed with SIGKILL: no cleanup of its own
runs. As soon as the lease has lapsed, the same command runs the day again at once: it marks the
killed run `abandoned` (saying so), rolls back the breaks the killed run had written, and the
day ends with every finding exactly once, all of the complete run. On PostgreSQL and on one
SQLite file shared by both processes.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from sqlalchemy import func, select

from paycore.db.engine import Database
from paycore.reconciliation.models import reconciliation_breaks, reconciliation_runs
from paycore.reconciliation.report import HEADER
from tests.e2e.support import CLI_TIMEOUT_S, paycore_command, server_env

DAY = "2026-11-29"
LINES = 30_000
EVERY = 250
UNKNOWN = LINES // EVERY
LEASE_MS = 2_000
WAIT_S = 120


def report(path: Path) -> None:
    with path.open("w", newline="") as out:
        out.write(",".join(HEADER) + "\r\n")
        for number in range(LINES):
            status = "succeeded" if number % EVERY == 0 else "failed"  # a failed unknown charge moved nothing
            out.write(f"charge,pay_{number:06d},ch_{number:06d},m-kill,1000,30,USD,{status},{DAY}T10:00:00Z,,\r\n")


def reconcile(database_url: str, path: Path) -> subprocess.Popen[str]:
    env = server_env(database_url, PAYCORE_LOG_LEVEL="WARNING", PAYCORE_RECONCILE_LEASE_MS=str(LEASE_MS))
    command = [*paycore_command(), "reconcile", "--report", str(path)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def runs(database: Database) -> list[tuple[str, str]]:
    with database.read() as connection:
        query = select(reconciliation_runs.c.id, reconciliation_runs.c.status).order_by(reconciliation_runs.c.id)
        return [(row.id, row.status) for row in connection.execute(query)]


def breaks(database: Database, **where: str) -> int:
    with database.read() as connection:
        query = select(func.count()).select_from(reconciliation_breaks)
        for name, value in where.items():
            query = query.where(reconciliation_breaks.c[name] == value)
        return int(connection.execute(query).scalar_one())


def test_a_reconcile_killed_with_sigkill_is_abandoned_and_its_day_runs_again_whole(
    database_url: str, database: Database, tmp_path: Path
) -> None:
    path = tmp_path / "report.csv"
    report(path)
    first = reconcile(database_url, path)
    deadline = time.monotonic() + WAIT_S
    while breaks(database) < UNKNOWN // 6:  # some chunks written, far from all of them
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first run wrote no break"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=CLI_TIMEOUT_S)
    assert first.returncode == -signal.SIGKILL
    ((killed, status),) = runs(database)
    written = breaks(database, run_id=killed)
    assert status == "running" and 0 < written < UNKNOWN, (status, written)  # half a day, as it was left

    time.sleep(LEASE_MS / 1000 + 0.2)  # the lease lapses: the day may run again at once
    second = reconcile(database_url, path)
    out, err = second.communicate(timeout=WAIT_S)

    assert second.returncode == 0, err
    assert f"abandoned run {killed} of {DAY} (its lease lapsed): {written} of its breaks rolled back" in out, out
    assert f"new breaks: missing_in_paycore {UNKNOWN}" in out, out
    (_, (completed, _)) = runs(database)
    assert runs(database) == [(killed, "abandoned"), (completed, "completed")]
    assert breaks(database, status="open") == UNKNOWN  # whole: every finding once
    assert breaks(database, status="open", run_id=completed) == UNKNOWN
    assert breaks(database, run_id=killed, status="superseded") == written  # rolled back, none left open
