"""Issue 29 item 4, on both databases: a reconciliation run that stops renewing its lease (its
process killed with kill -9, hung, or stopped by an error) is marked `abandoned`, its day can be
run again at once, and what it had written is rolled back whole: never half a day's breaks.

The kill is simulated by a report that stops arriving after the run has taken the day and
written its first chunk (the run renews nothing from then on, as a process that is gone), and
the lease's lapse by moving paycore's clock past it. `tests/e2e/test_reconcile_killed.py` does
it with a real `paycore reconcile` process and SIGKILL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select

from paycore.kit import clock
from paycore.reconciliation import days
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.errors import DayBusy
from paycore.reconciliation.models import reconciliation_breaks, reconciliation_runs, reconciliation_seen
from paycore.reconciliation.report import HEADER, NotAReport
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_reconcile import run_cli
from tests.integration.reconciliation.test_scheduled_job import worker

TENANT = "default"
DAY = "2030-06-02"  # a day of its own: nothing paycore holds moved on it
LINES = 1_200  # three chunks of 500
EVERY = 100  # one charge paycore never made (a `missing_in_paycore`) every 100 lines
UNKNOWN = LINES // EVERY
FIRST_CHUNK_UNKNOWN = 5  # lines 0, 100, ..., 400
STALL_AT = 700  # the report stops arriving here: the first chunk is written, the second not
LEASE_MS = 60_000
WAIT_S = 30


@pytest.fixture
def transport() -> str:
    return "inprocess"


def report_lines() -> list[str]:
    lines = [",".join(HEADER) + "\r\n"]
    for number in range(LINES):
        status = "succeeded" if number % EVERY == 0 else "failed"  # a failed unknown charge moved nothing
        lines.append(f"charge,pay_{number:06d},ch_{number:06d},{TENANT},1000,30,USD,{status},{DAY}T10:00:00Z,,\r\n")
    return lines


@dataclass
class Stalled:
    """A run whose report stops arriving at line STALL_AT until `resume()`: it has taken the
    day and written its first chunk, then renews nothing, as a process killed with kill -9.
    Resumed, it reads on: what it then tries to write must be refused."""

    lines: list[str]
    reached: threading.Event = field(default_factory=threading.Event)
    go_on: threading.Event = field(default_factory=threading.Event)
    outcome: list[BaseException | reconciliation.Summary] = field(default_factory=list)

    def __iter__(self) -> Iterator[str]:
        for index, text in enumerate(self.lines):
            if index == STALL_AT:
                self.reached.set()
                assert self.go_on.wait(WAIT_S)
            yield text

    def start(self, env: Env) -> threading.Thread:
        def run() -> None:
            try:
                self.outcome.append(reconciliation.reconcile(env.database, self, lease_ms=LEASE_MS))
            except BaseException as error:  # the test reads what the run ended with
                self.outcome.append(error)

        thread = threading.Thread(target=run, name="stalled-run", daemon=True)
        thread.start()
        assert self.reached.wait(WAIT_S), self.outcome
        return thread

    def resume(self, thread: threading.Thread) -> BaseException | reconciliation.Summary:
        self.go_on.set()
        thread.join(WAIT_S)
        assert not thread.is_alive()
        (ended,) = self.outcome
        return ended


def runs(env: Env) -> list[dict[str, Any]]:
    with env.database.read() as connection:
        query = select(reconciliation_runs).order_by(reconciliation_runs.c.id)
        return [dict(row._mapping) for row in connection.execute(query)]


def day_breaks(env: Env) -> list[dict[str, Any]]:
    with env.database.read() as connection:
        query = select(reconciliation_breaks).where(reconciliation_breaks.c.day == DAY)
        return [dict(row._mapping) for row in connection.execute(query.order_by(reconciliation_breaks.c.id))]


def open_findings(env: Env) -> list[tuple[str, str]]:
    """(type, request id) of the day's open breaks, sorted: the day's breaks as a reader sees them."""
    found = [row for row in day_breaks(env) if row["status"] == "open"]
    return sorted((row["type"], row["finding_key"].rsplit(":", 1)[1]) for row in found)


def every_finding() -> list[tuple[str, str]]:
    return [("missing_in_paycore", f"pay_{number:06d}") for number in range(0, LINES, EVERY)]


def seen_of(env: Env, run_id: str) -> int:
    with env.database.read() as connection:
        query = select(reconciliation_seen.c.request_id).where(reconciliation_seen.c.run_id == run_id)
        return len(connection.execute(query).all())


def lapse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time passes beyond the lease: paycore's clock jumps a lease and a second ahead."""
    real = clock.now_us
    monkeypatch.setattr(clock, "now_us", lambda: real() + (LEASE_MS + 1_000) * 1_000)


def test_a_run_that_stopped_is_abandoned_when_a_worker_looks_and_its_breaks_are_rolled_back(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stalled = Stalled(report_lines())
    thread = stalled.start(env)
    (dead,) = runs(env)
    assert dead["status"] == "running" and len(open_findings(env)) == FIRST_CHUNK_UNKNOWN  # half a day, running
    # Workers with no day due: they only look (a worker looks once an interval: two of them).
    worker(env, monkeypatch, delay_ms=10**9).run_at(clock.now_us())  # the lease is alive: nothing
    assert runs(env)[0]["status"] == "running"
    lapse(monkeypatch)
    worker(env, monkeypatch, delay_ms=10**9).run_at(clock.now_us())

    (said,) = [record for record in caplog.records if getattr(record, "event", None) == "reconciliation_run_abandoned"]
    assert (said.run_id, said.day, said.rolled_back) == (dead["id"], DAY, FIRST_CHUNK_UNKNOWN)  # type: ignore[attr-defined]
    (abandoned,) = runs(env)
    assert (abandoned["id"], abandoned["status"]) == (dead["id"], "abandoned")
    assert abandoned["finished_at_us"] is not None
    assert open_findings(env) == []  # rolled back whole: no half day
    rolled_back = day_breaks(env)
    assert [row["status"] for row in rolled_back] == ["superseded"] * FIRST_CHUNK_UNKNOWN
    assert seen_of(env, dead["id"]) == 0
    (listed,) = env.client.get("/v1/reconciliation/runs").json()["data"]
    assert (listed["id"], listed["status"]) == (dead["id"], "abandoned")
    assert listed["finished_at"] is not None
    page = env.client.get("/ops/reconciliation").text  # local mode: the console needs no sign-in
    assert (
        f'<code>{dead["id"]}</code></td><td>{DAY}</td><td>file</td><td><span class="badge abandoned">abandoned' in page
    )
    events = env.client.get(f"/v1/audit_events?object_id={rolled_back[0]['id']}").json()["data"]
    assert [(event["type"], event["cause"]) for event in events][:1] == [
        ("reconciliation.break_superseded", "run_abandoned")
    ]

    # The run wakes up (a process paused, not dead): it may write nothing more.
    ended = stalled.resume(thread)
    assert isinstance(ended, days.LeaseLost), ended
    assert open_findings(env) == [] and len(day_breaks(env)) == FIRST_CHUNK_UNKNOWN
    assert runs(env)[0]["status"] == "abandoned"

    again = reconciliation.reconcile(env.database, report_lines())  # the day runs again: whole
    assert dict(again.breaks) == {"missing_in_paycore": UNKNOWN}
    assert open_findings(env) == every_finding()


def test_a_new_run_of_the_day_takes_it_at_once_when_the_lease_lapsed_and_says_what_it_abandoned(
    env: Env, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = Stalled(report_lines())
    thread = stalled.start(env)
    (dead,) = runs(env)
    path = tmp_path / "report.csv"
    path.write_text("".join(report_lines()), newline="")
    with pytest.raises(DayBusy):  # the lease is alive: the day is the run's
        reconciliation.reconcile(env.database, report_lines())
    lapse(monkeypatch)

    result = run_cli(env, "--report", str(path))

    assert result.exit_code == 0, result.output
    assert (
        f"abandoned run {dead['id']} of {DAY} (its lease lapsed): {FIRST_CHUNK_UNKNOWN} of its breaks rolled back"
        in result.stdout
    )
    assert f"new breaks: missing_in_paycore {UNKNOWN}" in result.stdout
    first, second = runs(env)
    assert (first["id"], first["status"], second["status"]) == (dead["id"], "abandoned", "completed")
    assert open_findings(env) == every_finding()  # whole, each finding once, all the new run's
    assert {row["run_id"] for row in day_breaks(env) if row["status"] == "open"} == {second["id"]}
    statuses = [row["status"] for row in day_breaks(env) if row["run_id"] == dead["id"]]
    assert statuses == ["superseded"] * FIRST_CHUNK_UNKNOWN

    ended = stalled.resume(thread)
    assert isinstance(ended, days.LeaseLost), ended
    assert open_findings(env) == every_finding()


class Broken(Exception):
    """The report's source failed half-way (a disk, a pipe, a connection)."""


def failing(lines: list[str], at: int, error: BaseException) -> Iterator[str]:
    for index, text in enumerate(lines):
        if index == at:
            raise error
        yield text


@pytest.mark.parametrize("error", [Broken("the source went away"), KeyboardInterrupt()])
def test_a_run_stopped_by_an_error_is_abandoned_at_once_and_its_day_is_free(env: Env, error: BaseException) -> None:
    with pytest.raises(type(error)):
        reconciliation.reconcile(env.database, failing(report_lines(), STALL_AT, error))

    (stopped,) = runs(env)
    assert stopped["status"] == "abandoned"
    assert open_findings(env) == []
    assert [row["status"] for row in day_breaks(env)] == ["superseded"] * FIRST_CHUNK_UNKNOWN
    again = reconciliation.reconcile(env.database, report_lines())  # no lease to wait out
    assert open_findings(env) == every_finding() and again.breaks["missing_in_paycore"] == UNKNOWN


def test_a_report_found_not_utf8_half_way_through_a_stream_stops_its_run_and_rolls_it_back(env: Env) -> None:
    """A stream (a pipe, the processor's answer) is read as it comes: a line that is not UTF-8
    after the first chunk stops the run, which is abandoned with its breaks (item 6)."""
    lines = report_lines()
    lines[STALL_AT] = lines[STALL_AT].replace("failed", "faile\udce9")  # a Latin-1 byte, as read

    with pytest.raises(NotAReport, match=f"line {STALL_AT + 1} is not UTF-8"):
        reconciliation.reconcile(env.database, iter(lines))

    (stopped,) = runs(env)
    assert stopped["status"] == "abandoned" and open_findings(env) == []


def test_a_completed_run_is_never_abandoned(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    done = reconciliation.reconcile(env.database, report_lines(), lease_ms=1)
    lapse(monkeypatch)
    assert reconciliation.abandon_lapsed(env.database, now_us=clock.now_us(), actor="local") == []
    later = reconciliation.reconcile(env.database, report_lines())

    assert later.abandoned == []
    assert [row["status"] for row in runs(env)] == ["completed", "completed"]
    assert {row["run_id"] for row in day_breaks(env)} == {done.run_id}  # met again, not stored twice
    assert open_findings(env) == every_finding()
