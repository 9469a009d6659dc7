"""Helpers for the refund tests: a paid payment, refund requests, worker rounds, balances."""

from __future__ import annotations

import itertools
import time
from typing import Any

from sqlalchemy import func, select

from paycore.ledger.verify import verify
from paycore.workers.jobs import WorkerContext, resolve_refunds, send_refunds
from paycore_sandbox.models import refunds as sandbox_refunds
from tests.integration.payments.conftest import Env

_keys = itertools.count(1)


def paid(env: Env, *, token: str = "tok_ok", amount_minor: int = 1000) -> tuple[str, str]:
    """(merchant account id, succeeded payment id)."""
    merchant = env.account()
    response = env.pay(merchant, token=token, amount_minor=amount_minor)
    assert response.status_code == 201, response.text
    return merchant, str(response.json()["id"])


def refund(
    env: Env,
    payment_id: str,
    amount_minor: int,
    *,
    key: str | None = None,
    reason: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    body: dict[str, Any] = {"amount_minor": amount_minor}
    if reason is not None:
        body["reason"] = reason
    return env.client.post(
        f"/v1/payments/{payment_id}/refunds",
        json=body,
        headers={"Idempotency-Key": key or f"rf-{next(_keys)}", **(headers or {})},
    )


def created(env: Env, payment_id: str, amount_minor: int) -> dict[str, Any]:
    response = refund(env, payment_id, amount_minor)
    assert response.status_code == 201, response.text
    return dict(response.json())


def get(env: Env, refund_id: str) -> dict[str, Any]:
    response = env.client.get(f"/v1/refunds/{refund_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def status_of(env: Env, refund_id: str) -> str:
    return str(get(env, refund_id)["status"])


def history(env: Env, refund_id: str) -> list[tuple[str | None, str, str]]:
    return [(step["from"], step["to"], step["cause"]) for step in get(env, refund_id)["history"]]


def events(env: Env, refund_id: str, kind: str) -> list[dict[str, Any]]:
    data = env.client.get(f"/v1/refunds/{refund_id}/events").json()["data"]
    return [event for event in data if event["kind"] == kind]


def _context(env: Env) -> WorkerContext:
    return WorkerContext.create(env.database, env.settings, env.processor)


def send(env: Env) -> int:
    """One round of the worker job that sends due `pending` refunds."""
    return send_refunds(_context(env))


def resolve(env: Env) -> int:
    """One resolver round; test settings make every retry due within 2 ms."""
    time.sleep(0.005)
    return resolve_refunds(_context(env))


def money(env: Env, account_id: str) -> tuple[int, int, int]:
    """(posted, pending, available) of an account, in minor units."""
    balance = env.balance(account_id)
    return balance["posted_minor"], balance["pending_minor"], balance["available_minor"]


def refundable(env: Env, payment_id: str) -> int:
    return int(env.client.get(f"/v1/payments/{payment_id}").json()["refundable_minor"])


def assert_ledger_verifies(env: Env) -> None:
    with env.database.read() as connection:
        report = verify(connection)
    assert report.ok, report.problems


def in_doubt_metric(env: Env) -> str:
    lines = env.client.get("/metrics").text.splitlines()
    found = [line for line in lines if line.startswith('paycore_in_doubt_items{kind="refund"}')]
    assert len(found) == 1, lines
    return found[0]


def refunds_at_sandbox(env: Env) -> int:
    """How many refunds the processor holds, all request ids together."""
    with env.sandbox.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(sandbox_refunds)).scalar_one())
