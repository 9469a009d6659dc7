"""The worker's rounds on a database distributed by tenant on Citus (ADR 0033), only when
PAYCORE_TEST_CITUS_URL names a coordinator (`scripts/citus up` prints such a URL): the
migrations and `paycore db distribute` (idempotent), then, with the sandbox processor in this
process (its own SQLite file): a payment whose answer was lost is left `in_doubt` and the
resolver's round settles it; a refund is sent by `send_refunds`; a payout is queued and sent;
the payment's events reach a
tenant's webhook endpoint through a delivery round; every other job of `paycore worker` runs a
round without an error; the books verify. Before claims per tenant, every claiming job failed
there with `0A000` "could not run distributed query with FOR UPDATE/SHARE commands"."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from paycore.cli.main import app as cli
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.payouts import service as payouts_service
from paycore.webhooks import rounds as webhooks_rounds
from paycore.workers import jobs
from paycore.workers.jobs import WorkerContext
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.support import citus_shared, secrets_keys
from tests.support import payouts as payouts_support
from tests.support.receiver import Receiver

CITUS_URL = os.environ.get("PAYCORE_TEST_CITUS_URL")
pytestmark = pytest.mark.skipif(
    not CITUS_URL, reason="PAYCORE_TEST_CITUS_URL is not set: no Citus coordinator to distribute on (scripts/citus)"
)
TIMEOUT_MS = 5_000


@pytest.fixture
def citus(tmp_path: Path) -> Iterator[tuple[Database, Sandbox]]:
    assert CITUS_URL is not None
    patch = pytest.MonkeyPatch()
    patch.setenv("PAYCORE_DATABASE_URL", CITUS_URL)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the CLI logs to its (captured) stderr
    settings = Settings(
        database_url=CITUS_URL,
        secrets_keys=(secrets_keys.KEY,),
        processor_timeout_ms=TIMEOUT_MS,
        processing_stale_ms=60_000,
        resolver_backoff_ms=1,
        resolver_backoff_max_ms=2,
        webhook_backoff_ms=1,
        webhook_backoff_max_ms=2,
    )
    database = Database(settings)
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}")
    try:
        with citus_shared.held(CITUS_URL):
            migrate.upgrade(database)
            result = CliRunner().invoke(cli, ["db", "distribute"])
            assert result.exit_code == 0, result.output
            yield database, sandbox
    finally:
        sandbox.close()
        database.dispose()
        root.handlers[:], root.level = handlers, level
        patch.undo()


def _later() -> None:
    time.sleep(0.005)  # the test settings back a round off by 1-2 ms: the next one finds it due


def test_worker_rounds_claim_and_move_work_on_citus(citus: tuple[Database, Sandbox]) -> None:
    database, sandbox = citus
    processor = InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS)
    settings = replace(database.settings)
    suffix = os.urandom(4).hex()
    with Receiver() as receiver, TestClient(create_app(settings, database, processor)) as client:
        keyring = cast(FastAPI, client.app).state.keyring.get()
        context = WorkerContext.create(database, settings, processor, keyring)
        made = client.post(
            "/v1/webhook_endpoints",
            json={"url": receiver.url, "events": ["*"]},
            headers={"Idempotency-Key": f"we-{suffix}"},
        )
        assert made.status_code == 201, made.text
        merchant = client.post(
            "/v1/accounts", json={"code": f"merchant.{suffix}", "currency": "USD", "normal_balance": "credit"}
        ).json()["id"]
        sandbox.set_fault_plan(
            {"seed": 1, "hold_ms": 0, "settle_late_ms": 0, "rules": [{"fault": "drop_response", "next_n": 1}]}
        )
        paid = client.post(
            "/v1/payments",
            json={
                "amount_minor": 700,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": merchant,
            },
            headers={"Idempotency-Key": f"pay-{suffix}"},
        )
        assert paid.status_code == 202 and paid.json()["status"] == "in_doubt", paid.text
        payment_id = paid.json()["id"]
        _until(lambda: jobs.resolve_payments(context) >= 0 and _status(client, payment_id) == "succeeded")

        refund = client.post(
            f"/v1/payments/{payment_id}/refunds", json={"amount_minor": 200}, headers={"Idempotency-Key": f"r-{suffix}"}
        )
        assert refund.status_code == 201, refund.text
        refund_id = refund.json()["id"]
        _until(lambda: _send_and_resolve(context) and _refund_status(client, refund_id) == "succeeded")

        payee = f"payee-{suffix}"  # a tenant of its own: the database keeps earlier runs' accounts
        source = payouts_support.funded_source(database, payee, 500)
        payout = payouts_support.schedule(database, payee, source, 500)  # for today: queued, then sent
        assert jobs.queue_payouts(context) >= 1 and jobs.send_payouts(context) >= 1
        assert _payout_status(database, payee, payout.id) not in {"scheduled", "queued"}

        config = jobs.webhook_config(settings, keyring)
        _until(
            lambda: (
                webhooks_rounds.deliver_due(database, config, context.worker_id, endpoints_max=4) >= 0
                and _got(receiver, payment_id)
            )
        )
        for name, job, _bound in jobs.JOBS:  # every claiming job runs a round without an error
            assert job(context) >= 0, name
    result = CliRunner().invoke(cli, ["ledger", "verify"])
    assert result.exit_code == 0 and "ledger verified" in result.output, result.output


def _until(done: Any, rounds_max: int = 20) -> None:
    for _ in range(rounds_max):
        _later()
        if done():
            return
    raise AssertionError("not done after the rounds")


def _send_and_resolve(context: WorkerContext) -> bool:
    jobs.send_refunds(context)
    jobs.resolve_refunds(context)
    return True


def _status(client: TestClient, payment_id: str) -> str:
    return str(client.get(f"/v1/payments/{payment_id}").json()["status"])


def _refund_status(client: TestClient, refund_id: str) -> str:
    return str(client.get(f"/v1/refunds/{refund_id}").json()["status"])


def _payout_status(database: Database, tenant_id: str, payout_id: str) -> str:
    with database.read() as connection:
        found = payouts_service.MACHINE.load(connection, tenant_id, payout_id)
    return found.status


def _got(receiver: Receiver, payment_id: str) -> bool:
    return any(payment_id.encode() in got.body for got in receiver.delivered())
