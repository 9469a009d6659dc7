"""The fault run of issue 40 ("Done when"): authorizations captured and canceled while their
answers are lost, the worker killed with SIGKILL mid-run and restarted; at the end the books
verify and no money moved twice.

Real processes: the sandbox processor (`paycore processor serve`, its own SQLite file) and
`paycore worker`s on the test's database; the API is the test's own app over HTTP to the
sandbox. Run twice: with the sandbox's webhooks sent to a port nobody listens on, so every
payment left in doubt is resolved by the resolver's status query; and with them sent to the
test's app served on a real port, refused (503) until the worker is killed and received after,
so that the processor's late `charge.captured` / `charge.canceled` race the second worker and
the requests still being driven. Either way: evidence, never a guess.

1. Manual payments are authorized. Under a fault plan (the first captures' answers lost, the
   first cancels never arriving, then a share of each) they are captured (all or part),
   canceled, or captured and canceled at once; a client whose answer was lost retries with
   the same key, and a second capture under another key is refused.
2. The first worker resolves while every status query is held a second at the sandbox; it is
   killed with SIGKILL while it holds claims. A second worker starts; the rest of the payments
   are driven; then the faults stop and the test waits until nothing is left in doubt.
3. `paycore ledger verify` passes; every payment is captured or canceled exactly as its
   charge at the processor is, closed there by exactly one request; every hold is posted (for
   what was captured) or voided exactly once; every step out of `in_doubt` was made by evidence.
"""

from __future__ import annotations

import itertools
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.server import Server
from paycore.ledger.models import entries, transfers
from paycore.payments.models import payments
from paycore.processor.http_transport import HttpTransport
from tests.e2e.payments_support import CliProcess, SandboxProcess, wait_for
from tests.e2e.support import assert_ledger_verifies, free_port, sandbox_rows
from tests.e2e.test_payments_worker_crash import start_worker, worker_env, workers

__all__ = ["workers"]  # the fixture: the workers, stopped and logged at the end

PAYMENTS = 24  # a quarter each: full capture, partial capture, cancel, capture racing cancel
AMOUNT_MINOR = 5_000
PARTIAL_MINOR = 1_234
API_TIMEOUT_MS = 2_000
HELD_MS = 1_000  # each status query of the first worker, held at the sandbox
LEASE_MS = 4_000  # > a batch of two held status queries and their re-sends: the claim outlives them
STALE_MS = 3_000  # a payment left `processing` (an answer that could not be recorded) is taken after this
RETRIES_MAX = 5  # a client's retries of one request answered 503 (the database busy)
WAIT_S = 90
LOST = [
    {"fault": "drop_response", "next_n": 2, "ops": ["capture"]},  # captured, the answer lost
    {"fault": "drop_request", "next_n": 2, "ops": ["cancel"]},  # the cancel never arrives
    {"fault": "drop_response", "percent": 30, "ops": ["capture", "cancel"]},
    {"fault": "drop_request", "percent": 20, "ops": ["capture", "cancel"]},
]
HELD = {"fault": "delay_ms", "delay_ms": HELD_MS, "percent": 100, "ops": ["get_charge"]}
EVIDENCE = {"resolver", "processor_answer", "webhook", "settlement_report"}  # the causes that are the processor's word
_keys = itertools.count(1)


@dataclass
class Webhooks:
    """The port the sandbox sends its webhooks to, and whether the test's app answers there."""

    port: int
    served: bool
    up: bool = False  # while down (or not served), the sandbox's deliveries fail and are retried

    def gate(self, app: Any) -> Any:
        """The app behind a 503 while the endpoint is down (an ASGI wrapper)."""

        async def gated(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and not self.up:
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b"down"})
                return
            await app(scope, receive, send)

        return gated


@pytest.fixture(params=["status_queries_only", "webhooks_too"])
def sandbox_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SandboxProcess, Webhooks]]:
    webhooks = Webhooks(free_port(), served=request.param == "webhooks_too")
    url = f"http://127.0.0.1:{webhooks.port}/v1/webhooks/processor"
    sandbox = SandboxProcess(tmp_path / "sandbox.db", url, tmp_path / "sandbox.log")
    sandbox.start()
    yield sandbox, webhooks
    sandbox.stop()
    print(f"--- sandbox (port {sandbox.port}):\n{sandbox.log()}")


class Driver:
    """The client: every request and its answer, a request answered 503 retried with its key."""

    def __init__(self, client: TestClient, merchant: str) -> None:
        self.client = client
        self.merchant = merchant
        self.answers: list[tuple[str, str, int, dict[str, Any]]] = []  # (payment, operation, status, body)
        self.lock = threading.Lock()

    def post(self, path: str, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
        for _ in range(RETRIES_MAX):
            response = self.client.post(path, json=body, headers={"Idempotency-Key": key})
            if response.status_code != 503:
                return response.status_code, dict(response.json())
        raise AssertionError(f"{path}: 503 {RETRIES_MAX} times")

    def authorize(self, index: int) -> str:
        body = {
            "amount_minor": AMOUNT_MINOR + index,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": self.merchant,
            "capture": "manual",
        }
        status, payment = self.post("/v1/payments", body, f"authorize-{index}")
        assert (status, payment["status"]) == (201, "requires_capture"), payment
        return str(payment["id"])

    def operate(self, payment_id: str, operation: str, amount_minor: int | None = None) -> tuple[int, dict[str, Any]]:
        """A capture or cancel; an answer lost (202 in doubt) is retried once with the same key,
        which answers what the key answered and sends nothing again."""
        body = {} if amount_minor is None else {"amount_minor": amount_minor}
        path, key = f"/v1/payments/{payment_id}/{operation}", f"{operation}-{next(_keys)}"
        status, answer = self.post(path, body, key)
        assert status in (200, 202, 409), (status, answer)
        if status == 202:
            assert (answer["status"], answer["in_doubt_operation"]) == ("in_doubt", operation), answer
            assert self.post(path, body, key) == (status, answer)
        with self.lock:
            self.answers.append((payment_id, operation, status, answer))
        return status, answer

    def drive(self, index: int) -> str:
        """One payment, by its index: captured in full (then a second capture, refused), in part,
        canceled, or captured and canceled at once."""
        payment = self.authorize(index)
        kind = index % 4
        if kind == 0:
            self.operate(payment, "capture")
            status, refused = self.operate(payment, "capture")
            assert (status, refused["error"]) == (409, "payment_not_capturable"), refused
        elif kind == 1:
            self.operate(payment, "capture", PARTIAL_MINOR)
        elif kind == 2:
            self.operate(payment, "cancel")
        else:
            self.race(payment)
        return payment

    def race(self, payment_id: str) -> None:
        barrier = threading.Barrier(2)
        codes: dict[str, int] = {}

        def send(operation: str) -> None:
            barrier.wait(WAIT_S)
            codes[operation] = self.operate(payment_id, operation)[0]

        threads = [threading.Thread(target=send, args=(operation,)) for operation in ("capture", "cancel")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
        assert sorted(codes) == ["cancel", "capture"], codes
        assert sorted(code == 409 for code in codes.values()) == [False, True], codes  # exactly one lost


@pytest.mark.slow
def test_captures_and_cancels_with_lost_answers_and_a_killed_worker_move_money_once(
    tmp_path: Path,
    settings: Settings,
    database_url: str,
    database: Database,
    sandbox_run: tuple[SandboxProcess, Webhooks],
    workers: list[CliProcess],
) -> None:
    sandbox, webhooks = sandbox_run
    api_settings = replace(settings, processor_timeout_ms=API_TIMEOUT_MS, processing_stale_ms=STALE_MS)
    env = worker_env(database_url, sandbox.url)
    env.update(
        PAYCORE_CLAIM_LEASE_MS=str(LEASE_MS),
        PAYCORE_PROCESSING_STALE_MS=str(STALE_MS),
        PAYCORE_RESOLVER_BATCH_MAX="2",
        PAYCORE_RESOLVER_ATTEMPTS_MAX="50",  # the run ends by evidence, not by giving up
    )
    processor = HttpTransport(sandbox.url, timeout_ms=API_TIMEOUT_MS)
    app = create_app(api_settings, database, processor)
    server = Server(webhooks.gate(app), "127.0.0.1", webhooks.port) if webhooks.served else None
    if server is not None:
        threading.Thread(target=server.serve_forever, daemon=True, name="webhooks-in").start()
    try:
        _run(tmp_path, database_url, database, sandbox, webhooks, workers, env, TestClient(app))
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _run(
    tmp_path: Path,
    database_url: str,
    database: Database,
    sandbox: SandboxProcess,
    webhooks: Webhooks,
    workers: list[CliProcess],
    env: dict[str, str],
    client: TestClient,
) -> None:
    with client:
        merchant = client.post(
            "/v1/accounts", json={"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
        )
        assert merchant.status_code == 201, merchant.text
        driver = Driver(client, merchant.json()["id"])

        # 1. The first half, under lost answers, the first worker's status queries held.
        sandbox.set_faults({"seed": 40, "hold_ms": 0, "rules": [*LOST, HELD]})
        first = start_worker(workers, tmp_path, env)
        driven = [driver.drive(index) for index in range(PAYMENTS // 2)]

        # 2. kill -9 while it holds claims (inside a held status query), then a second worker.
        held = wait_for("the first worker holds a claim", lambda: _claimed_by(database, first.pid), WAIT_S, first.log)
        assert first.kill9() == -signal.SIGKILL
        left = [row for row in _rows(database) if row["claimed_by"] is not None]
        assert left and all(row["status"] in ("processing", "in_doubt") for row in left), (held, left)
        webhooks.up = True  # served: the processor's retries of its webhooks now arrive
        sandbox.set_faults({"seed": 41, "hold_ms": 0, "rules": LOST[2:]})
        second = start_worker(workers, tmp_path, env)
        driven += [driver.drive(index) for index in range(PAYMENTS // 2, PAYMENTS)]

        # 3. The network heals; the second worker resolves what is left by evidence.
        sandbox.clear_faults()
        wait_for("every payment captured or canceled", lambda: _all_closed(database), WAIT_S, second.log)
        second.stop()  # a quiet database for the checks

    lost = Counter(operation for _, operation, status, _ in driver.answers if status == 202)
    histories = client_history(database, {row["id"]: row for row in _rows(database)})
    resolved = Counter(step["to"] for steps in histories.values() for step in steps if step["from"] == "in_doubt")
    causes = Counter(step["cause"] for steps in histories.values() for step in steps if step["from"] == "in_doubt")
    print(
        f"answers lost: {dict(lost)}; the killed worker held {held}; out of doubt: {dict(resolved)} by {dict(causes)}"
    )
    assert lost["capture"] >= 1 and lost["cancel"] >= 1, lost  # both kinds of answer were lost
    rows = {row["id"]: row for row in _rows(database)}
    assert sorted(rows) == sorted(driven)
    assert_ledger_verifies(database_url)
    _agree_with_the_processor(rows, sandbox_rows(sandbox.database_path, "sandbox_charges"))
    _closed_once_at_the_processor(rows, sandbox_rows(sandbox.database_path, "sandbox_charge_actions"))
    _holds_resolved_once(database, rows)
    _in_doubt_left_by_evidence(histories)


def _rows(database: Database) -> list[dict[str, Any]]:
    with database.read() as connection:
        return [dict(row) for row in connection.execute(select(payments)).mappings()]


def _claimed_by(database: Database, pid: int) -> list[str] | None:
    claimed = [row["id"] for row in _rows(database) if f":{pid}:" in (row["claimed_by"] or "")]
    return claimed or None


def _all_closed(database: Database) -> bool | None:
    return True if all(row["status"] in ("succeeded", "canceled") for row in _rows(database)) else None


def _agree_with_the_processor(rows: dict[str, dict[str, Any]], charges: list[dict[str, Any]]) -> None:
    """Each payment is what its charge at the processor proves: captured for the same amount,
    or canceled as asked."""
    by_request = {charge["request_id"]: charge for charge in charges}
    assert len(by_request) == len(rows)
    for payment in rows.values():
        charge = by_request[payment["processor_request_id"]]
        if payment["status"] == "succeeded":
            assert charge["status"] == "captured", (payment, charge)
            assert payment["amount_captured_minor"] == charge["captured_minor"], (payment, charge)
            assert charge["captured_minor"] + charge["released_minor"] == charge["amount_minor"]
        else:
            assert (payment["status"], payment["cancellation_reason"]) == ("canceled", "requested"), payment
            assert (charge["status"], charge["captured_minor"]) == ("canceled", 0), (payment, charge)


def _closed_once_at_the_processor(rows: dict[str, dict[str, Any]], actions: list[dict[str, Any]]) -> None:
    """Every charge was closed by exactly one request, the one paycore sent for its payment
    (`<payment id>_capture` or `_cancel`): no capture or cancel was made twice."""
    closing = Counter(action["charge_request_id"] for action in actions)
    assert sorted(closing) == sorted(row["processor_request_id"] for row in rows.values())
    assert set(closing.values()) == {1}, closing
    for action in actions:
        payment = next(row for row in rows.values() if row["processor_request_id"] == action["charge_request_id"])
        operation = "capture" if payment["status"] == "succeeded" else "cancel"
        assert (action["request_id"], action["kind"]) == (f"{payment['processor_request_id']}_{operation}", operation)


def _holds_resolved_once(database: Database, rows: dict[str, dict[str, Any]]) -> None:
    """Every payment's hold has exactly one resolution: posted for what was captured (the rest
    released in the same step), or voided; the merchant holds what was captured, nothing pending."""
    with database.read() as connection:
        resolutions = connection.execute(
            select(transfers.c.pending_id, transfers.c.kind, transfers.c.id).where(
                transfers.c.pending_id.in_([row["transfer_id"] for row in rows.values()])
            )
        ).all()
        debited = dict(
            connection.execute(
                select(entries.c.transfer_id, func.sum(entries.c.amount_minor))
                .where(entries.c.transfer_id.in_([resolution.id for resolution in resolutions]))
                .where(entries.c.direction == "debit")
                .group_by(entries.c.transfer_id)
            ).all()
        )
    count = Counter(resolution.pending_id for resolution in resolutions)
    assert set(count.values()) == {1} and len(count) == len(rows), count
    of_hold = {resolution.pending_id: resolution for resolution in resolutions}
    for payment in rows.values():
        resolution = of_hold[payment["transfer_id"]]
        if payment["status"] == "succeeded":
            assert resolution.kind == "post", (payment, resolution)
            assert debited[resolution.id] == payment["amount_captured_minor"], (payment, debited[resolution.id])
        else:
            assert (resolution.kind, debited.get(resolution.id)) == ("void", None), (payment, resolution)


def client_history(database: Database, rows: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each payment's state changes as its audit events record them."""
    from paycore.audit import service as audit

    with database.read() as connection:
        return {
            payment_id: [
                {"from": event.from_state, "to": event.to_state, "cause": event.cause, "actor": event.actor}
                for event in audit.events_of(connection, row["tenant_id"], payment_id, limit=100)
                if event.kind == "state_change"
            ]
            for payment_id, row in rows.items()
        }


def _in_doubt_left_by_evidence(histories: dict[str, list[dict[str, Any]]]) -> None:
    """Some payments were in doubt, and each left it only on the processor's word."""
    left = [step for steps in histories.values() for step in steps if step["from"] == "in_doubt"]
    assert left, "no payment was in doubt: the fault plan did not bite"
    assert all(step["cause"] in EVIDENCE for step in left), left
    assert all(step["actor"] != "local" and not step["actor"].startswith("operator") for step in left), left
