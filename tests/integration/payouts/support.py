"""Helpers for the payout execution tests: schedule over HTTP, run the worker's payout jobs,
move the sandbox bank's clock forward, deliver its webhooks."""

from __future__ import annotations

import itertools
import time
from typing import Any

from sqlalchemy import func, select

from paycore.kit.clock import now_us
from paycore.workers.jobs import WorkerContext, queue_payouts, resolve_payouts, send_payouts
from paycore_sandbox.models import bank_payouts
from tests.integration.payments.conftest import Env

TENANT = "default"
ROUTING = "110000000"
SETTLES = "000123456789"
REJECTED_R03 = "000111111113"
RETURNED_R02 = "000333333335"
_keys = itertools.count(1)
BANK_DONE_MS = 10_000  # past every step of the sandbox bank's default schedule


def ach(source: str, amount_minor: int = 2_500, account_number: str = SETTLES, **changes: Any) -> dict[str, Any]:
    return {
        "amount_minor": amount_minor,
        "currency": "USD",
        "source_account": source,
        "rail": "ach",
        "beneficiary": {"name": "Ada Lovelace", "routing_number": ROUTING, "account_number": account_number},
        **changes,
    }


def schedule(env: Env, payload: dict[str, Any]) -> dict[str, Any]:
    response = env.client.post("/v1/payouts", json=payload, headers={"Idempotency-Key": f"po-{next(_keys)}"})
    assert response.status_code == 201, response.text
    return dict(response.json())


def get(env: Env, payout_id: str) -> dict[str, Any]:
    response = env.client.get(f"/v1/payouts/{payout_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def context(env: Env) -> WorkerContext:
    return WorkerContext.create(env.database, env.settings, env.processor)


def queue_and_send(env: Env) -> int:
    ctx = context(env)
    queue_payouts(ctx)
    return send_payouts(ctx)


def resolve(env: Env) -> int:
    time.sleep(0.005)  # test settings make every retry due within 1-2 ms
    return resolve_payouts(context(env))


def bank_finishes(env: Env, *, deliver: bool = True) -> None:
    """Move the sandbox bank through batch close, rejection, settlement and returns, then
    deliver its webhooks to paycore (unless `deliver` is False)."""
    start = now_us()
    for step_ms in (1_000, 2_000, 3_000, 5_000, BANK_DONE_MS):
        env.sandbox.settle_due(now_us=start + step_ms * 1_000)
    if deliver:
        for _ in range(5):
            if env.deliver(now_us=start + BANK_DONE_MS * 1_000) == 0:
                break


def payouts_at_bank(env: Env) -> int:
    with env.sandbox.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(bank_payouts)).scalar_one())


def events(env: Env, payout_id: str, kind: str) -> list[dict[str, Any]]:
    data = env.client.get(f"/v1/payouts/{payout_id}/events").json()["data"]
    return [event for event in data if event["kind"] == kind]
