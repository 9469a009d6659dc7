"""The dispute fault run of issue 41 ("Done when": the books verify after a fault run):
chargebacks opened while their webhooks are lost, answered while answers are lost, the worker
killed with SIGKILL while it holds claims and restarted, the day's settlement report reconciled;
at the end paycore holds every dispute the processor holds, once, as the processor says it, and
no money moved twice.

Real processes: the sandbox processor (`paycore processor serve`, its own SQLite file), its
webhooks delivered to the test's app served on a real port, `paycore worker`s and `paycore
reconcile` on the test's database (SQLite file or PostgreSQL).

1. `tok_disputed` payments (the sandbox opens a chargeback of all of each a second later) and
   two `tok_ok` ones it disputes in part by its admin call. The first openings' `dispute.created`
   is never sent (`drop_webhook`): paycore does not hear of those disputes until step 4.
2. Half of the disputes paycore knows are answered (winning evidence, losing evidence, accept)
   under a plan that loses the first answers and some of their webhooks; the first worker's
   status queries of the kept answers never get an answer. It is killed with SIGKILL while it
   holds claims; a second worker starts and the other half is answered under lost answers.
3. The faults stop; the test waits until the processor has decided every answered dispute and
   paycore says what it says, with no answer left in flight.
4. `paycore reconcile --day` reads the day's report: its lines name the disputes paycore never
   heard of; it asks the processor for each (the status query) and records them.
5. Every dispute is in paycore once with the processor's status, amount and fee; each chargeback
   withdrawn by one transfer, each won one reinstated by one more; the merchant's balance is what
   the processor's charges and disputes imply; `paycore ledger verify` passes, the invariants find
   nothing, and no reconciliation break is open.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.disputes.models import dispute_answers_in_flight, disputes
from paycore.http.app import create_app
from paycore.http.server import Server
from paycore.invariants import service as invariants
from paycore.kit import clock
from paycore.ledger.models import transfers
from paycore.processor.http_transport import HttpTransport
from paycore.reconciliation.models import reconciliation_breaks
from tests.e2e.payments_support import CliProcess, SandboxProcess, wait_for
from tests.e2e.support import (
    CLI_TIMEOUT_S,
    REPO_ROOT,
    assert_ledger_verifies,
    call,
    free_port,
    paycore_command,
    sandbox_rows,
    server_env,
)
from tests.e2e.test_capture_fault_run import Driver
from tests.e2e.test_payments_worker_crash import start_worker, worker_env, workers

__all__ = ["workers"]  # the fixture: the workers, stopped and logged at the end

DISPUTED = 14  # tok_disputed payments: a chargeback of all of each
OPENED = 2  # tok_ok payments disputed in part by the sandbox's admin call
AMOUNT_MINOR = 5_000
OPENED_MINOR = 2_500  # of AMOUNT_MINOR + index: a partial chargeback
UNHEARD = 3  # the first openings whose dispute.created is never sent
ANSWERS = ("winning_evidence", "losing_evidence", "accept")
API_TIMEOUT_MS = 3_000
HOLD_MS = 500  # a dropped answer is a 504 after this
LEASE_MS = 4_000
WAIT_S = 60
OPENING = {"fault": "drop_webhook", "next_n": UNHEARD, "ops": ["dispute_open"]}
LOST_FIRST = [  # the answers' webhooks settle a lost evidence; a lost accept only a status query
    {"fault": "drop_response", "next_n": 1, "ops": ["dispute_evidence"]},  # evidence in, the answer lost
    {"fault": "drop_response", "next_n": 2, "ops": ["dispute_accept"]},  # accepted, the answer lost ...
    {"fault": "drop_webhook", "next_n": 2, "ops": ["dispute_accept"]},  # ... and its dispute.closed
]
LOST_SOME = [
    {"fault": "drop_response", "percent": 30, "ops": ["dispute_evidence", "dispute_accept"]},
    {"fault": "drop_webhook", "percent": 30, "ops": ["dispute_evidence", "dispute_accept"]},
]
UNANSWERED = {"fault": "drop_response", "percent": 100, "ops": ["get_dispute"]}  # the first worker's queries
OPEN_AT_PROCESSOR = {"needs_response", "under_review", "warning_needs_response"}


@pytest.fixture
def sandbox_to(tmp_path: Path) -> Iterator[tuple[SandboxProcess, int]]:
    """The sandbox, its webhooks sent to a port the test's app will serve."""
    port = free_port()
    sandbox = SandboxProcess(
        tmp_path / "sandbox.db", f"http://127.0.0.1:{port}/v1/webhooks/processor", tmp_path / "sandbox.log"
    )
    sandbox.start()
    yield sandbox, port
    sandbox.stop()
    print(f"--- sandbox (port {sandbox.port}):\n{sandbox.log()}")


@pytest.mark.slow
def test_disputes_with_lost_webhooks_and_answers_and_a_killed_worker_settle_once(
    tmp_path: Path,
    settings: Settings,
    database_url: str,
    database: Database,
    sandbox_to: tuple[SandboxProcess, int],
    workers: list[CliProcess],
) -> None:
    sandbox, port = sandbox_to
    env = worker_env(database_url, sandbox.url)
    env.update(PAYCORE_CLAIM_LEASE_MS=str(LEASE_MS), PAYCORE_RESOLVER_BATCH_MAX="2")
    env.update(PAYCORE_RESOLVER_ATTEMPTS_MAX="50")  # the run ends by evidence, not by giving up
    app = create_app(settings, database, HttpTransport(sandbox.url, timeout_ms=API_TIMEOUT_MS))
    server = Server(app, "127.0.0.1", port)
    threading.Thread(target=server.serve_forever, daemon=True, name="webhooks-in").start()
    try:
        with TestClient(app) as client:
            _run(tmp_path, database_url, database, sandbox, workers, env, client)
    finally:
        server.shutdown()
        server.server_close()


def _run(
    tmp_path: Path,
    database_url: str,
    database: Database,
    sandbox: SandboxProcess,
    workers: list[CliProcess],
    env: dict[str, str],
    client: TestClient,
) -> None:
    merchant = client.post(
        "/v1/accounts", json={"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
    )
    assert merchant.status_code == 201, merchant.text
    merchant_id = merchant.json()["id"]
    driver = Driver(client, merchant_id)

    # 1. Payments, and their disputes; the first openings' webhooks lost.
    sandbox.set_faults({"seed": 41, "hold_ms": HOLD_MS, "rules": [OPENING, *LOST_FIRST, UNANSWERED]})
    paid = [_pay(driver, index, "tok_disputed") for index in range(DISPUTED)]
    opened = [_pay(driver, DISPUTED + index, "tok_ok") for index in range(OPENED)]
    for payment in opened:
        body = {"payment_reference": payment["processor_reference"], "amount_minor": OPENED_MINOR, "reason": "general"}
        reply = call(sandbox.port, "POST", "/v1/sandbox/disputes", body)
        assert reply.status in (200, 201) and reply.body["status"] == "needs_response", reply
    payment_ids = [payment["id"] for payment in paid + opened]
    total = DISPUTED + OPENED
    known = wait_for(
        "the processor opened every dispute, paycore heard of all but the unheard",
        lambda: _heard_of(database, sandbox, total, total - UNHEARD),
        WAIT_S,
        sandbox.log,
    )
    order = {payment_id: index for index, payment_id in enumerate(payment_ids)}
    answered = sorted(known, key=lambda dispute: order[dispute["payment_id"]])
    half = len(answered) // 2

    # 2. Answers under lost answers; the first worker killed while it holds claims.
    first = start_worker(workers, tmp_path, env)
    replies = [_answer(driver, dispute["id"], index, retry=False) for index, dispute in enumerate(answered[:half])]
    held = wait_for(
        "the first worker holds a claim",
        lambda: _claimed_by(database, first.pid),
        WAIT_S,
        lambda: f"{first.log()}\nin flight: {_in_flight(database)}; answers: {replies}",
    )
    assert first.kill9() == -signal.SIGKILL
    left = _in_flight(database)
    assert set(held) <= {row["id"] for row in left}, (held, left)  # no answer came: still kept
    sandbox.set_faults({"seed": 42, "hold_ms": HOLD_MS, "rules": LOST_SOME})
    second = start_worker(workers, tmp_path, env)
    replies += [
        _answer(driver, dispute["id"], index, retry=True) for index, dispute in enumerate(answered) if index >= half
    ]

    # 3. The network heals: the processor decides, paycore hears it or asks.
    sandbox.clear_faults()
    wait_for("paycore says what the processor says", lambda: _settled(database, sandbox), WAIT_S, second.log)
    second.stop()

    # 4. The day's report: its lines name the disputes paycore never heard of.
    reconciled = _reconcile(database_url, sandbox.url)
    assert f"disputes recorded from the processor's answers about its lines: {UNHEARD}" in reconciled, reconciled
    assert "new breaks: none" in reconciled, reconciled

    lost = Counter(status for status in replies if status == 202)
    held_disputes = {row["processor_dispute_id"]: row for row in _disputes(database)}
    at_processor = sandbox_rows(sandbox.database_path, "sandbox_disputes")
    print(
        f"answers: {Counter(replies)}; the killed worker held {held}; statuses: "
        f"{Counter(row['status'] for row in at_processor)}\n{reconciled}"
    )
    assert lost[202] >= 2, replies  # the plan bit
    _as_the_processor_says(held_disputes, at_processor, client)
    _moved_once(database, held_disputes)
    _balance_as_the_processor_implies(client, merchant_id, sandbox, payment_ids)
    assert_ledger_verifies(database_url)
    with database.read() as connection:
        assert invariants.verify_books(connection) == []
        still_open = connection.execute(
            select(func.count()).select_from(reconciliation_breaks).where(reconciliation_breaks.c.status == "open")
        ).scalar_one()
    assert still_open == 0


def _pay(driver: Driver, index: int, token: str) -> dict[str, Any]:
    body = {
        "amount_minor": AMOUNT_MINOR + index,
        "currency": "USD",
        "source": {"type": "card", "token": token},
        "destination_account": driver.merchant,
    }
    status, payment = driver.post("/v1/payments", body, f"pay-{index}")
    assert (status, payment["status"]) == (201, "succeeded"), payment
    return payment


def _answer(driver: Driver, dispute_id: str, index: int, *, retry: bool) -> int:
    """Evidence that wins, evidence that loses, or an accept, by index. An answer lost (202, the
    dispute kept for the worker) is left to the worker, or (`retry`) sent again with its key (the
    same request at the processor: never a second answer)."""
    kind = ANSWERS[index % len(ANSWERS)]
    path, body = (
        (f"/v1/disputes/{dispute_id}/accept", {})
        if kind == "accept"
        else (f"/v1/disputes/{dispute_id}/evidence", {"text": f"delivery receipt: {kind}"})
    )
    key = f"{kind}-{dispute_id}"
    status, answer = driver.post(path, body, key)
    assert status in (200, 202) and answer["id"] == dispute_id, (status, answer)
    if status == 202 and retry:
        again, same = driver.post(path, body, key)
        assert again in (200, 202) and same["id"] == dispute_id, (again, same)
    return status


def _disputes(database: Database) -> list[dict[str, Any]]:
    with database.read() as connection:
        return [dict(row) for row in connection.execute(select(disputes)).mappings()]


def _in_flight(database: Database) -> list[dict[str, Any]]:
    with database.read() as connection:
        return [dict(row) for row in connection.execute(select(dispute_answers_in_flight)).mappings()]


def _heard_of(database: Database, sandbox: SandboxProcess, opened: int, heard: int) -> list[dict[str, Any]] | None:
    held = _disputes(database)
    at_processor = sandbox_rows(sandbox.database_path, "sandbox_disputes")
    return held if (len(at_processor), len(held)) == (opened, heard) else None


def _claimed_by(database: Database, pid: int) -> list[str] | None:
    claimed = [row["id"] for row in _in_flight(database) if f":{pid}:" in (row["claimed_by"] or "")]
    return claimed or None


def _settled(database: Database, sandbox: SandboxProcess) -> bool | None:
    """True once no answer is in flight, every answered dispute is decided at the processor, and
    each dispute paycore holds has the processor's status."""
    if _in_flight(database):
        return None
    at_processor = {row["dispute_id"]: row for row in sandbox_rows(sandbox.database_path, "sandbox_disputes")}
    held = _disputes(database)
    decided = all(
        row["status"] not in OPEN_AT_PROCESSOR
        for row in at_processor.values()
        if row["evidence_submitted_at_us"] is not None
    )
    agree = all(at_processor[row["processor_dispute_id"]]["status"] == row["status"] for row in held)
    return True if decided and agree else None


def _reconcile(database_url: str, processor_url: str) -> str:
    day = clock.to_rfc3339(clock.now_us())[:10]
    result = subprocess.run(
        [*paycore_command(), "reconcile", "--day", day],
        env=server_env(database_url, PAYCORE_PROCESSOR_URL=processor_url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"paycore reconcile exited {result.returncode}:\n{result.stdout}{result.stderr}"
    return result.stdout


def _as_the_processor_says(
    held: dict[str, dict[str, Any]], at_processor: list[dict[str, Any]], client: TestClient
) -> None:
    """Every dispute of the processor's is in paycore once, as the processor has it; those paycore
    never heard of were made by the status query of the report's lines."""
    assert sorted(held) == sorted(row["dispute_id"] for row in at_processor)
    assert len({row["id"] for row in held.values()}) == len(held)
    for row in at_processor:
        mine = held[row["dispute_id"]]
        said = (row["status"], row["type"], row["amount_minor"], row["fee_minor"])
        assert (mine["status"], mine["type"], mine["amount_minor"], mine["fee_minor"]) == said, (mine, row)
    unanswered = [row for row in held.values() if row["status"] == "needs_response"]
    assert len(unanswered) == UNHEARD, unanswered
    for dispute in unanswered:
        history = client.get(f"/v1/disputes/{dispute['id']}").json()["history"]
        assert [(step["from"], step["to"], step["cause"]) for step in history] == [
            (None, "needs_response", "status_query")
        ], history
    statuses = Counter(row["status"] for row in held.values())
    assert statuses["won"] >= 1 and statuses["lost"] >= 2, statuses


def _moved_once(database: Database, held: dict[str, dict[str, Any]]) -> None:
    """Each chargeback withdrawn (amount and fee) by exactly one transfer it owns; each won one
    reinstated (the amount) by exactly one more; nothing else."""
    ids = [row["id"] for row in held.values()]
    with database.read() as connection:
        owned = Counter(
            owner for (owner,) in connection.execute(select(transfers.c.owner_id).where(transfers.c.owner_id.in_(ids)))
        )
    for row in held.values():
        won = row["status"] == "won"
        assert owned[row["id"]] == (2 if won else 1), (row, owned[row["id"]])
        assert row["withdrawal_transfer_id"] is not None, row
        assert (row["reinstatement_transfer_id"] is not None) == won, row
        assert row["withdrawn_minor"] == row["amount_minor"] + row["fee_minor"], row
        assert row["reinstated_minor"] == (row["amount_minor"] if won else 0), row


def _balance_as_the_processor_implies(
    client: TestClient, merchant_id: str, sandbox: SandboxProcess, payment_ids: list[str]
) -> None:
    """The merchant's posted balance: what the processor captured, less each chargeback's amount
    and fee, plus each reinstated amount (integer minor units)."""
    charges = sandbox_rows(sandbox.database_path, "sandbox_charges")
    assert len(charges) == len(payment_ids)
    assert {(charge["status"], charge["capture"], charge["refunded_minor"]) for charge in charges} == {
        ("succeeded", "automatic", 0)
    }, charges
    implied = sum(charge["amount_minor"] for charge in charges)  # charged at once: all of it
    for dispute in sandbox_rows(sandbox.database_path, "sandbox_disputes"):
        implied -= dispute["amount_minor"] + dispute["fee_minor"]
        if dispute["reinstated_at_us"] is not None:
            implied += dispute["amount_minor"]
    balance = client.get(f"/v1/accounts/{merchant_id}/balance").json()
    assert type(balance["posted_minor"]) is int and balance["posted_minor"] == implied, (balance, implied)
