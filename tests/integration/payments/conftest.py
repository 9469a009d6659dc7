"""Payments against the real sandbox processor, through both transports.

`inprocess`: the sandbox in this process behind `InProcessTransport`. `http`: the sandbox's
own HTTP app served by uvicorn on a free port, behind `HttpTransport`. Either way the sandbox
keeps its own SQLite file, and its webhooks are delivered to the paycore app under test by
`Env.deliver()` (deterministic: tests decide when webhooks arrive).
"""

from __future__ import annotations

import itertools
import time
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
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import Processor
from paycore.workers.jobs import WorkerContext, resolve_payments
from paycore_sandbox.http import create_app as create_sandbox_app
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import charges
from paycore_sandbox.service import Sandbox
from tests.support.servers import serve_in_thread

TIMEOUT_MS = 2000  # generous: a loaded CI machine must not turn a slow answer into in_doubt
_keys = itertools.count(1)


@dataclass
class Env:
    client: TestClient
    sandbox: Sandbox
    processor: Processor
    database: Database
    settings: Settings
    transport: str

    def deliver(self, now_us: int | None = None) -> int:
        """Deliver every due sandbox webhook to paycore; returns how many got a 2xx."""

        def sink(body: bytes, headers: dict[str, str]) -> int:
            return self.client.post("/v1/webhooks/processor", content=body, headers=headers).status_code

        return self.sandbox.deliver_due(sink, now_us)

    def resolve(self) -> int:
        """One resolver round, as a worker runs it. Test settings make every attempt due at
        once (backoff of 1-2 ms), so a round is "time has passed" without touching the clock."""
        time.sleep(0.005)
        return resolve_payments(WorkerContext.create(self.database, self.settings, self.processor))

    def faults(self, *rules: dict[str, Any], seed: int = 1) -> None:
        self.sandbox.set_fault_plan(
            {"seed": seed, "hold_ms": TIMEOUT_MS * 3, "settle_late_ms": 0, "rules": list(rules)}
        )

    def charges_at_sandbox(self) -> int:
        with self.sandbox.database.read() as connection:
            return int(connection.execute(select(func.count()).select_from(charges)).scalar_one())

    def account(self, code: str = "merchant.main") -> str:
        response = self.client.post(
            "/v1/accounts",
            json={"code": code, "currency": "USD", "normal_balance": "credit"},
            headers={"Idempotency-Key": f"acct-{code}"},
        )
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])

    def pay(
        self,
        destination: str,
        *,
        token: str = "tok_ok",
        amount_minor: int = 1000,
        key: str | None = None,
        capture: str | None = None,
    ) -> Any:
        body: dict[str, Any] = {
            "amount_minor": amount_minor,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": destination,
        }
        if capture is not None:
            body["capture"] = capture
        return self.client.post("/v1/payments", json=body, headers={"Idempotency-Key": key or f"pay-{next(_keys)}"})

    def events(self, payment_id: str, kind: str) -> list[dict[str, Any]]:
        data = self.client.get(f"/v1/payments/{payment_id}/events").json()["data"]
        return [event for event in data if event["kind"] == kind]

    def balance(self, account_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/accounts/{account_id}/balance")
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(params=["inprocess", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}")
    yield box
    box.close()


@pytest.fixture
def processor(transport: str, sandbox: Sandbox) -> Iterator[Processor]:
    if transport == "inprocess":
        yield InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS)
        return
    with serve_in_thread(create_sandbox_app(sandbox)) as base_url:
        yield HttpTransport(base_url, timeout_ms=TIMEOUT_MS)
        sandbox.release_held()  # else the server's shutdown waits out a held answer (4 s)


@pytest.fixture
def env(
    settings: Settings, database: Database, sandbox: Sandbox, processor: Processor, transport: str
) -> Iterator[Env]:
    settings = replace(
        settings,
        processor_timeout_ms=TIMEOUT_MS,
        idempotency_wait_ms=3_000,
        processing_stale_ms=60_000,  # realistic: in_doubt items must be scheduled by their own rule
        resolver_backoff_ms=1,
        resolver_backoff_max_ms=2,
        resolver_attempts_max=3,
    )
    with TestClient(create_app(settings, database, processor)) as client:
        yield Env(client, sandbox, processor, database, settings, transport)
