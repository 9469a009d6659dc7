"""kill -9 of a worker in the middle of resolving a payment (SPEC §10, ADR 0006).

Real processes: the sandbox processor (`paycore processor serve`) and two `paycore worker`s,
on the test's database. A payment is left `in_doubt` (the processor took the charge, the
answer was lost), the sandbox is told to hold the next `get_charge` for a few seconds, and
the first worker is killed with SIGKILL while it waits for that answer, after it committed
its claim. The payment must still be `in_doubt` with nothing of that call recorded; once the
lease lapses a second worker takes it and resolves it exactly once: one state change, one
posting of the pending transfer, one charge at the processor, and the ledger verifies.

The sandbox's webhooks go to a port nobody listens on, so only the resolver can decide.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.processor.http_transport import HttpTransport
from tests.e2e.payments_support import CliProcess, SandboxProcess, clean_env, payment_row, wait_for
from tests.e2e.support import SERVER_POOL_SIZE, assert_ledger_verifies, call, free_port

AMOUNT_MINOR = 4321
API_TIMEOUT_MS = 2_000  # the API's own call; the sandbox answers a dropped response at once
WORKER_TIMEOUT_MS = 10_000  # longer than the held get_charge: the worker would get its answer
HELD_MS = 4_000  # how long the sandbox holds the first worker's get_charge
LEASE_MS = 2_000  # shorter than the hold: the lease lapses while the call would still run
WAIT_S = 30


def worker_env(database_url: str, processor_url: str) -> dict[str, str]:
    return clean_env(
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_DB_POOL_SIZE=str(SERVER_POOL_SIZE),
        PAYCORE_PROCESSOR_URL=processor_url,
        PAYCORE_PROCESSOR_TIMEOUT_MS=str(WORKER_TIMEOUT_MS),
        PAYCORE_CLAIM_LEASE_MS=str(LEASE_MS),
        PAYCORE_RESOLVER_BACKOFF_MS="100",
        PAYCORE_WORKER_INTERVAL_MS="100",
        PAYCORE_PROCESSING_STALE_MS="600000",
    )


@pytest.fixture
def sandbox_process(tmp_path: Path) -> Iterator[SandboxProcess]:
    nobody = free_port()  # webhooks are refused: the resolver alone resolves
    sandbox = SandboxProcess(
        tmp_path / "sandbox.db", f"http://127.0.0.1:{nobody}/v1/webhooks/processor", tmp_path / "sandbox.log"
    )
    sandbox.start()
    yield sandbox
    sandbox.stop()
    print(f"--- sandbox (port {sandbox.port}):\n{sandbox.log()}")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[CliProcess]]:
    """The worker processes a test starts; stopped (if still alive) and their logs printed at teardown."""
    started: list[CliProcess] = []
    yield started
    for worker in started:
        worker.stop()
    for index, worker in enumerate(started):
        print(f"--- worker {index + 1} (pid {worker.process.pid if worker.process else '-'}):\n{worker.log()}")


def start_worker(workers: list[CliProcess], tmp_path: Path, env: dict[str, str]) -> CliProcess:
    worker = CliProcess(["worker"], env, tmp_path / f"worker-{len(workers) + 1}.log")
    workers.append(worker)
    worker.launch()
    return worker


def history(client: TestClient, payment_id: str) -> list[tuple[str | None, str, str, str]]:
    body = client.get(f"/v1/payments/{payment_id}").json()
    return [(step["from"], step["to"], step["cause"], step["actor"]) for step in body["history"]]


def processor_calls(client: TestClient, payment_id: str) -> list[dict[str, Any]]:
    data = client.get(f"/v1/payments/{payment_id}/events").json()["data"]
    return [event for event in data if event["kind"] == "processor_call"]


def held_call_arrived(sandbox: SandboxProcess) -> bool | None:
    """True once the sandbox has decided the held get_charge (the worker is inside its call)."""
    [rule] = sandbox.faults()["rules"]
    return True if rule["remaining"] == 0 else None


@pytest.mark.slow
def test_worker_killed_mid_resolution_then_another_resolves_it_exactly_once(
    tmp_path: Path,
    settings: Settings,
    database_url: str,
    database: Database,
    sandbox_process: SandboxProcess,
    workers: list[CliProcess],
) -> None:
    sandbox = sandbox_process
    api_settings = replace(settings, processor_timeout_ms=API_TIMEOUT_MS, processing_stale_ms=1)
    processor = HttpTransport(sandbox.url, timeout_ms=API_TIMEOUT_MS)
    with TestClient(create_app(api_settings, database, processor)) as client:
        # 1. A payment the processor took, whose answer was lost: in_doubt, money on hold.
        merchant = client.post(
            "/v1/accounts", json={"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
        )
        assert merchant.status_code == 201, merchant.text
        merchant_id = merchant.json()["id"]
        sandbox.set_faults({"seed": 1, "hold_ms": 0, "rules": [{"fault": "drop_response", "next_n": 1}]})
        created = client.post(
            "/v1/payments",
            json={
                "amount_minor": AMOUNT_MINOR,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": merchant_id,
            },
            headers={"Idempotency-Key": "crash-1"},
        )
        assert created.status_code == 202, created.text
        payment_id = created.json()["id"]
        assert created.json()["status"] == "in_doubt"
        assert [(row["request_id"], row["status"]) for row in sandbox.charge_rows()] == [(payment_id, "succeeded")]
        balance = client.get(f"/v1/accounts/{merchant_id}/balance").json()
        assert (balance["available_minor"], balance["pending_minor"]) == (0, AMOUNT_MINOR)

        # 2. The first worker claims it and calls get_charge, which the sandbox holds; kill -9.
        sandbox.set_faults(
            {
                "seed": 1,
                "hold_ms": 0,
                "rules": [{"fault": "delay_ms", "delay_ms": HELD_MS, "next_n": 1, "ops": ["get_charge"]}],
            }
        )
        env = worker_env(database_url, sandbox.url)
        first = start_worker(workers, tmp_path, env)
        claim = wait_for(
            "the first worker claims the payment",
            lambda: payment_row(database, payment_id)["claimed_by"],
            WAIT_S,
            first.log,
        )
        assert f":{first.pid}:" in claim, (claim, first.pid)  # the lease names its holder
        wait_for(
            "the first worker's get_charge reaches the sandbox", lambda: held_call_arrived(sandbox), WAIT_S, first.log
        )
        assert first.kill9() == -signal.SIGKILL

        row = payment_row(database, payment_id)
        assert (row["status"], row["claimed_by"], row["attempts"]) == ("in_doubt", claim, 0)
        assert row["claimed_until_us"] is not None
        calls = processor_calls(client, payment_id)
        assert [(c["type"], c["cause"], c["actor"]) for c in calls] == [("processor.charge", "unreachable", "local")]
        assert client.get(f"/v1/accounts/{merchant_id}/balance").json()["available_minor"] == 0

        # 3. A second worker takes the payment once the lease lapses, and resolves it.
        second = start_worker(workers, tmp_path, env)
        wait_for(
            "the second worker resolves the payment",
            lambda: True if payment_row(database, payment_id)["status"] == "succeeded" else None,
            WAIT_S,
            second.log,
        )
        second.stop()  # nothing may change after this point; the checks read a quiet database
        assert first.process is not None and first.process.returncode == -signal.SIGKILL

        steps = history(client, payment_id)
        assert [step[:3] for step in steps] == [
            (None, "processing", "api_request"),
            ("processing", "in_doubt", "processor_answer"),
            ("in_doubt", "succeeded", "resolver"),
        ], steps
        assert sum(1 for step in steps if step[:2] == ("in_doubt", "succeeded")) == 1
        assert steps[-1][3] == "worker:resolve_payments", steps[-1]
        data = client.get(f"/v1/payments/{payment_id}/events").json()["data"]
        [resolved] = [e for e in data if e["kind"] == "state_change" and e["from"] == "in_doubt"]
        assert f":{second.pid}:" in resolved["data"]["worker_id"], (resolved, second.pid)
        calls = processor_calls(client, payment_id)
        # The killed worker's call left nothing; the second found the charge and did not re-send it.
        assert [(c["type"], c["cause"]) for c in calls] == [
            ("processor.charge", "unreachable"),
            ("processor.get_charge", "answered"),
        ], calls
        assert calls[1]["actor"] == "worker:resolve_payments"
        assert f":{second.pid}:" in calls[1]["data"]["worker_id"], (calls[1], second.pid)

        row = payment_row(database, payment_id)
        assert row["claimed_by"] is None and row["claimed_until_us"] is None and row["next_attempt_at_us"] is None
        assert row["attempts"] == 1
        body = client.get(f"/v1/payments/{payment_id}").json()
        assert (body["status"], body["amount_minor"]) == ("succeeded", AMOUNT_MINOR)
        balance = client.get(f"/v1/accounts/{merchant_id}/balance").json()
        assert (balance["posted_minor"], balance["pending_minor"], balance["available_minor"]) == (
            AMOUNT_MINOR,
            0,
            AMOUNT_MINOR,
        )
        # The original answer stays the answer to the key.
        again = client.post(
            "/v1/payments",
            json={
                "amount_minor": AMOUNT_MINOR,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": merchant_id,
            },
            headers={"Idempotency-Key": "crash-1"},
        )
        assert (again.status_code, again.headers["Idempotent-Replayed"]) == (202, "true")
        assert again.json() == created.json()

    # 4. The processor holds exactly one charge for it, succeeded, for the amount.
    sandbox.clear_faults()
    reply = call(sandbox.port, "GET", f"/v1/charges/{payment_id}")
    assert reply.status == 200, reply
    assert (reply.body["status"], reply.body["amount_minor"]) == ("succeeded", AMOUNT_MINOR)
    assert reply.body["processor_charge_id"] == body["processor_reference"]
    rows = sandbox.charge_rows()
    assert [(r["request_id"], r["status"], r["amount_minor"]) for r in rows] == [
        (payment_id, "succeeded", AMOUNT_MINOR)
    ]
    assert_ledger_verifies(database_url)
