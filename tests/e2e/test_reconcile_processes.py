"""Issue 20 point 4, across OS processes: two `paycore reconcile` runs of one day never run at
the same time. The day's lease is a row in the database (ADR 0014), never a lock in a process.

Process A reads its report from a pipe and is held mid-report (it has read its first chunk,
taken the day and written it) while process B, another OS process, starts on the same day: B
must refuse in one line and write nothing. Once A has ended, B runs and stores nothing new.
On PostgreSQL and on one SQLite file shared by both processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from paycore.db.engine import Database
from paycore.reconciliation.models import reconciliation_breaks, reconciliation_days, reconciliation_runs
from paycore.reconciliation.report import HEADER

DAY = "2026-11-30"
LINES = 1_200  # more than two chunks: A is held after its first
UNKNOWN = 7  # charges paycore never made: one `missing_in_paycore` each
WAIT_S = 60


def report_lines() -> list[str]:
    lines = [",".join(HEADER) + "\r\n"]
    for number in range(LINES):
        status = "succeeded" if number < UNKNOWN else "failed"  # a failed unknown charge moved nothing
        lines.append(f"charge,pay_{number:06d},ch_{number:06d},m-race,1000,30,USD,{status},{DAY}T10:00:00Z,,\r\n")
    return lines


def command(database_url: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PAYCORE_DATABASE_URL": database_url, "PAYCORE_LOG_LEVEL": "WARNING"}
    paycore = Path(sys.executable).with_name("paycore")
    return subprocess.Popen(
        [str(paycore), "reconcile", *args],
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def count(database: Database, table: object) -> int:
    with database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def holder(database: Database) -> str | None:
    with database.read() as connection:
        return connection.execute(select(reconciliation_days.c.claimed_by)).scalar()


def test_two_processes_never_reconcile_one_day_at_once(database_url: str, database: Database, tmp_path: Path) -> None:
    lines = report_lines()
    path = tmp_path / "report.csv"
    path.write_text("".join(lines), newline="")
    first = command(database_url, "--report", "-", "--day", DAY, stdin=subprocess.PIPE)
    assert first.stdin is not None
    first.stdin.write("".join(lines[:700]))  # the first chunk, and some of the second
    first.stdin.flush()
    deadline = time.monotonic() + WAIT_S
    while holder(database) is None:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first run never took the day"
        time.sleep(0.05)
    taken_by = holder(database)

    second = command(database_url, "--report", str(path))
    out, err = second.communicate(timeout=WAIT_S)

    assert second.returncode == 1, (out, err)
    said = [line for line in err.splitlines() if line.strip()]
    assert said == [f"day {DAY} is being reconciled by {taken_by}; try again when it ends"], err
    assert count(database, reconciliation_runs) == 1  # B wrote nothing
    out, err = first.communicate("".join(lines[700:]), timeout=WAIT_S)
    assert first.returncode == 0, err
    assert f"lines read {LINES}" in out and f"missing_in_paycore {UNKNOWN}" in out
    assert holder(database) is None  # released

    again = command(database_url, "--report", str(path))
    out, err = again.communicate(timeout=WAIT_S)
    assert again.returncode == 0, err
    assert "new breaks: none" in out
    assert count(database, reconciliation_breaks) == UNKNOWN
