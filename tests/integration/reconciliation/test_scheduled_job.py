"""The worker's scheduled reconciliation (issue 20, docs/reconciliation.md "The scheduled job"),
against the sandbox processor's real reports, on both databases: a day past the delay is
fetched and reconciled once, oldest first, one per call; what is not due, done, held by another
run or unavailable from the processor is left alone, and the worker lives on.

The worker's clock is `paycore.workers.jobs.now_us`: moving it forward makes today a closed day
for the job while the sandbox and paycore keep their own time."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner, Result

from paycore.cli.main import app
from paycore.kit import clock
from paycore.ledger.verify import verify
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import Processor, ProcessorUnreachable
from paycore.reconciliation import days
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.models import reconciliation_runs
from paycore.reconciliation.report import HEADER
from paycore.reconciliation.service import CAUSE
from paycore.workers import jobs, loop
from paycore.workers.jobs import RECONCILE_DAYS, WorkerContext, reconcile_days
from tests.integration.payments.conftest import Env

INTERVAL_MS = 60_000


@pytest.fixture
def transport() -> str:
    return "inprocess"


class Counting:
    """The processor, counting the reports asked of it; `down` makes it answer none."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self.asked: list[str] = []
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.processor, name)

    def settlement_report(self, day: str) -> Iterator[str]:
        self.asked.append(day)
        if self.down:
            raise ProcessorUnreachable("settlement_report: ConnectionRefusedError")
        return self.processor.settlement_report(day)


@dataclasses.dataclass
class Worker:
    """One worker (its context lives across calls, as in `paycore worker`) and its clock."""

    context: WorkerContext
    processor: Counting
    monkeypatch: pytest.MonkeyPatch

    def run_at(self, now_us: int) -> int:
        self.monkeypatch.setattr("paycore.workers.jobs.now_us", lambda: now_us)
        return reconcile_days(self.context)


def worker(env: Env, monkeypatch: pytest.MonkeyPatch, *, delay_ms: int = 0, lookback_days: int = 1) -> Worker:
    settings = dataclasses.replace(
        env.settings,
        reconcile_delay_ms=delay_ms,
        reconcile_lookback_days=lookback_days,
        reconcile_interval_ms=INTERVAL_MS,
    )
    processor = Counting(env.processor)
    return Worker(WorkerContext.create(env.database, settings, processor), processor, monkeypatch)


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def start_of(day: str) -> int:
    return clock.parse_rfc3339(f"{day}T00:00:00Z")


def shifted(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def runs(env: Env) -> list[tuple[str, str, str]]:
    """(day, source, status) of every run, in the order they were made."""
    table = reconciliation_runs
    with env.database.read() as connection:
        query = select(table.c.day, table.c.source, table.c.status).order_by(table.c.created_at_us, table.c.id)
        return [(row.day, row.source, row.status) for row in connection.execute(query)]


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == name]


def in_doubt_payment(env: Env) -> dict[str, Any]:
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["charge"]})
    response = env.pay(env.account("merchant.recon"), amount_minor=2500)
    assert response.status_code == 202, response.text
    payment = dict(response.json())
    assert payment["status"] == "in_doubt"
    return payment


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_a_payment_left_in_doubt_on_a_closed_day_is_resolved_by_the_worker_job(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    payment = in_doubt_payment(env)
    day = today()
    job = worker(env, monkeypatch)
    caplog.set_level(logging.INFO)

    assert job.run_at(start_of(shifted(day, 1)) + 1) == 1

    shown = env.client.get(f"/v1/payments/{payment['id']}").json()
    assert shown["status"] == "succeeded"
    assert [(step["from"], step["to"], step["cause"]) for step in shown["history"]][-1] == (
        "in_doubt",
        "succeeded",
        CAUSE,
    )
    assert job.processor.asked == [day]
    assert runs(env) == [(day, "processor", "completed")]
    (line,) = events(caplog, "reconciliation_day_reconciled")
    assert (line.day, line.lines_read, line.matched, line.resolved, line.breaks_found) == (day, 1, 1, 1, 0)  # type: ignore[attr-defined]
    with env.database.read() as connection:
        assert verify(connection).ok


def test_a_day_already_reconciled_from_the_processor_is_not_fetched_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_doubt_payment(env)
    day = today()
    after = start_of(shifted(day, 1)) + 1
    # A run from a file is a person's: the processor's own report is still fetched.
    reconciliation.reconcile(env.database, list(env.processor.settlement_report(day)), source="file")
    assert worker(env, monkeypatch).run_at(after) == 1

    again = worker(env, monkeypatch)  # another worker, or this one after a restart
    assert again.run_at(after) == 0

    assert again.processor.asked == []
    assert runs(env) == [(day, "file", "completed"), (day, "processor", "completed")]


def test_a_day_not_yet_past_the_delay_is_not_reconciled(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    payment = in_doubt_payment(env)
    day = today()
    delay_ms = 2 * 3_600_000
    due_us = start_of(shifted(day, 1)) + delay_ms * 1_000

    assert worker(env, monkeypatch, delay_ms=delay_ms).run_at(due_us - 1) == 0
    assert runs(env) == []
    assert env.client.get(f"/v1/payments/{payment['id']}").json()["status"] == "in_doubt"

    assert worker(env, monkeypatch, delay_ms=delay_ms).run_at(due_us) == 1
    assert env.client.get(f"/v1/payments/{payment['id']}").json()["status"] == "succeeded"


def test_due_days_are_reconciled_oldest_first_and_the_worker_loop_drains_them(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    day = today()
    job = worker(env, monkeypatch, lookback_days=3)
    monkeypatch.setattr("paycore.workers.jobs.now_us", lambda: start_of(shifted(day, 1)) + 1)
    monkeypatch.setattr(loop, "JOBS", tuple(entry for entry in jobs.JOBS if entry[0] == RECONCILE_DAYS))

    assert loop.run_once(job.context).done == {RECONCILE_DAYS: 3}

    oldest_first = [shifted(day, -2), shifted(day, -1), day]
    assert job.processor.asked == oldest_first
    assert runs(env) == [(each, "processor", "completed") for each in oldest_first]
    assert loop.run_once(job.context).done == {RECONCILE_DAYS: 0}
    assert job.processor.asked == oldest_first


def test_a_processor_that_does_not_answer_is_logged_and_asked_again_an_interval_later(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    day = today()
    job = worker(env, monkeypatch, lookback_days=2)
    job.processor.down = True
    now = start_of(shifted(day, 1)) + 1
    caplog.set_level(logging.INFO)

    assert job.run_at(now) == 0

    assert job.processor.asked == [shifted(day, -1)]  # the first day failed: the others wait too
    (line,) = events(caplog, "reconciliation_report_unavailable")
    assert (line.levelname, line.day, line.error_type) == ("WARNING", shifted(day, -1), "ProcessorUnreachable")  # type: ignore[attr-defined]
    assert runs(env) == []
    job.processor.down = False
    assert job.run_at(now + INTERVAL_MS * 1_000 - 1) == 0  # within the interval: not even a look
    assert job.processor.asked == [shifted(day, -1)]
    assert job.run_at(now + INTERVAL_MS * 1_000) == 1
    assert job.run_at(now + INTERVAL_MS * 1_000) == 1  # more were due: it looks again at once
    assert runs(env) == [(shifted(day, -1), "processor", "completed"), (day, "processor", "completed")]


def test_a_day_another_run_holds_is_skipped_and_the_next_one_is_reconciled(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    day = today()
    held = shifted(day, -1)
    # Another run (a person at the CLI, another worker) holds the day's lease in the database.
    env.database.transaction(lambda connection: days.claim(connection, held, "rcn_OTHER", now_us=clock.now_us()))
    job = worker(env, monkeypatch, lookback_days=2)
    caplog.set_level(logging.INFO)

    assert job.run_at(start_of(shifted(day, 1)) + 1) == 1

    assert runs(env) == [(day, "processor", "completed")]
    (line,) = events(caplog, "reconciliation_day_busy")
    assert (line.day, line.holder) == (held, "rcn_OTHER")  # type: ignore[attr-defined]


def test_a_report_that_is_not_one_is_logged_and_the_worker_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    job = worker(env, monkeypatch)
    monkeypatch.setattr(job.processor, "settlement_report", lambda day: iter(["<html>maintenance</html>\r\n"]))
    caplog.set_level(logging.INFO)

    assert job.run_at(start_of(today()) + 1) == 0

    (line,) = events(caplog, "reconciliation_report_refused")
    assert line.levelname == "ERROR" and "not a settlement report" in line.getMessage()
    assert runs(env) == []


def test_which_days_are_due(env: Env) -> None:
    now = start_of("2030-06-10") + 3 * 3_600_000_000  # 03:00

    def due(delay_ms: int, lookback_days: int) -> list[str]:
        with env.database.read() as connection:
            return reconciliation.due_days(connection, now_us=now, delay_ms=delay_ms, lookback_days=lookback_days)

    assert due(0, 3) == ["2030-06-07", "2030-06-08", "2030-06-09"]
    assert due(3 * 3_600_000, 2) == ["2030-06-08", "2030-06-09"]  # the 9th ended exactly 3 h ago
    assert due(3 * 3_600_000 + 1, 2) == ["2030-06-08"]
    assert due(27 * 3_600_000, 3) == ["2030-06-07", "2030-06-08"]  # a delay past a day: two days back
    assert due(30 * 3_600_000, 3) == ["2030-06-07"]
    assert due(0, 0) == []
    reconciliation.reconcile(env.database, [",".join(HEADER) + "\r\n"], source="processor", day="2030-06-08")
    assert due(0, 3) == ["2030-06-07", "2030-06-09"]


# --- `paycore reconcile --day`: the same fetch, from the command line ------------------------


def run_cli(env: Env, *arguments: str, processor_url: str) -> Result:
    variables = {
        "PAYCORE_DATABASE_URL": env.settings.database_url,
        "PAYCORE_PROCESSOR_URL": processor_url,
        "PAYCORE_PROCESSOR_TIMEOUT_MS": "2000",
        "COLUMNS": "200",
    }
    return CliRunner().invoke(app, ["reconcile", *arguments], env=variables, catch_exceptions=False)


@pytest.mark.parametrize("transport", ["http"])
def test_the_command_fetches_a_day_from_the_processor(env: Env) -> None:
    payment = in_doubt_payment(env)
    assert isinstance(env.processor, HttpTransport)

    result = run_cli(env, "--day", today(), processor_url=env.processor.base_url)

    assert result.exit_code == 0, result.output
    assert "lines read 1, matched 1, resolved 1" in result.stdout
    assert runs(env) == [(today(), "processor", "completed")]
    assert env.client.get(f"/v1/payments/{payment['id']}").json()["status"] == "succeeded"


def test_the_command_says_so_in_one_line_when_the_processor_does_not_answer(env: Env) -> None:
    result = run_cli(env, "--day", today(), processor_url="http://127.0.0.1:9")

    assert result.exit_code == 1
    assert f"cannot fetch the processor's report of {today()}" in result.stderr
    assert "Traceback" not in result.output
    assert runs(env) == []
