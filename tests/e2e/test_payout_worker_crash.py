"""kill -9 of a worker between sending a payout and recording the answer (SPEC §11: "A
worker that dies mid-payout leaves a claim that expires and is picked up again; the bank
call is idempotent on the payout's reference, so re-running never sends twice").

Real processes: the sandbox (`paycore processor serve`, bank rail included) and two
`paycore worker`s on the test's database. The sandbox takes the payout and holds its answer
(`delay_ms`); the first worker is killed with SIGKILL while it waits. The payout is still
`processing`, held on the ledger, with nothing of that call recorded. Once the lease lapses a
second worker asks the bank, finds the payout, and follows it to `settled` without sending it
again: one payout at the bank, one `processing -> sent`, and the books verify.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from paycore.db.engine import Database
from paycore.payouts import states
from paycore.payouts.models import payouts
from tests.e2e.payments_support import CliProcess, SandboxProcess, wait_for
from tests.e2e.support import free_port
from tests.e2e.test_payments_worker_crash import start_worker, worker_env
from tests.support.payouts import balance, books_ok, funded_source, schedule

TENANT = "default"
AMOUNT_MINOR = 2_500
HELD_MS = 4_000  # how long the sandbox holds its answer to the first worker's send
WAIT_S = 30


@pytest.fixture
def sandbox_process(tmp_path: Path) -> Iterator[SandboxProcess]:
    nobody = free_port()  # webhooks are refused: the workers alone follow the payout
    sandbox = SandboxProcess(
        tmp_path / "sandbox.db", f"http://127.0.0.1:{nobody}/v1/webhooks/processor", tmp_path / "sandbox.log"
    )
    sandbox.start()
    yield sandbox
    sandbox.stop()
    print(f"--- sandbox (port {sandbox.port}):\n{sandbox.log()}")


@pytest.fixture
def workers() -> Iterator[list[CliProcess]]:
    started: list[CliProcess] = []
    yield started
    for worker in started:
        worker.stop()
    for index, worker in enumerate(started):
        print(f"--- worker {index + 1}:\n{worker.log()}")


def bank_rows(sandbox: SandboxProcess) -> list[dict[str, Any]]:
    connection = sqlite3.connect(f"file:{sandbox.database_path}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in connection.execute("SELECT * FROM sandbox_bank_payouts")]
    except sqlite3.OperationalError:  # the table is created at the sandbox's start
        return []
    finally:
        connection.close()


def payout_row(database: Database, payout_id: str) -> dict[str, Any]:
    with database.read() as connection:
        return dict(connection.execute(select(payouts).where(payouts.c.id == payout_id)).one()._mapping)


def calls_of(database: Database, payout_id: str) -> list[tuple[str, str]]:
    from paycore.audit import service as audit

    with database.read() as connection:
        found = audit.events_of(connection, TENANT, payout_id, limit=100)
    return [
        (event.type, f"{event.actor} {event.data.get('worker_id', '')}")
        for event in found
        if event.kind == "processor_call"
    ]


@pytest.mark.slow
def test_worker_killed_mid_send_then_another_finishes_it_without_sending_twice(
    tmp_path: Path,
    database_url: str,
    database: Database,
    sandbox_process: SandboxProcess,
    workers: list[CliProcess],
) -> None:
    sandbox = sandbox_process
    source = funded_source(database, TENANT, 10_000)
    payout = schedule(database, TENANT, source, AMOUNT_MINOR)
    sandbox.set_faults(
        {"seed": 1, "hold_ms": 0, "rules": [{"fault": "delay_ms", "delay_ms": HELD_MS, "next_n": 1, "ops": ["payout"]}]}
    )
    env = worker_env(database_url, sandbox.url)

    first = start_worker(workers, tmp_path, env)
    wait_for("the bank has the payout", lambda: bank_rows(sandbox) or None, WAIT_S, first.log)
    row = payout_row(database, payout.id)
    assert row["status"] == "processing" and f":{first.pid}:" in row["claimed_by"]
    assert first.kill9() == -signal.SIGKILL

    row = payout_row(database, payout.id)
    assert (row["status"], row["attempts"]) == ("processing", 0)
    assert calls_of(database, payout.id) == []  # the killed worker recorded nothing
    assert balance(database, TENANT, source) == (10_000, -AMOUNT_MINOR, 10_000 - AMOUNT_MINOR)

    second = start_worker(workers, tmp_path, env)
    wait_for(
        "the second worker follows the payout to settled",
        lambda: True if payout_row(database, payout.id)["status"] == states.SETTLED else None,
        WAIT_S,
        lambda: f"{second.log()}\n{payout_row(database, payout.id)}\n{bank_rows(sandbox)}",
    )
    second.stop()

    [at_bank] = bank_rows(sandbox)
    assert at_bank["request_id"] == payout.id
    calls = calls_of(database, payout.id)
    assert calls and all(kind == "processor.get_payout" for kind, _ in calls), calls  # asked, never re-sent
    assert all(f":{second.pid}:" in actor and actor.startswith("worker:resolve_payouts ") for _, actor in calls)
    row = payout_row(database, payout.id)
    assert row["claimed_by"] is None and row["bank_reference"]
    assert balance(database, TENANT, source) == (10_000 - AMOUNT_MINOR, 0, 10_000 - AMOUNT_MINOR)
    assert books_ok(database)
