"""What the capture and cancel tests share: an authorized payment, the two calls, a payment's
state as GET answers it."""

from __future__ import annotations

import itertools
from typing import Any

from tests.integration.payments.conftest import Env

_keys = itertools.count(1)


def authorized(env: Env, merchant: str, amount_minor: int = 5000, token: str = "tok_ok") -> dict[str, Any]:
    response = env.pay(merchant, amount_minor=amount_minor, capture="manual", token=token)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == "requires_capture"
    return body


def capture(env: Env, payment_id: str, amount_minor: Any = None, *, key: str | None = None) -> Any:
    body = {} if amount_minor is None else {"amount_minor": amount_minor}
    headers = {"Idempotency-Key": key or f"cap-{next(_keys)}"}
    return env.client.post(f"/v1/payments/{payment_id}/capture", json=body, headers=headers)


def cancel(env: Env, payment_id: str, *, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key or f"can-{next(_keys)}"}
    return env.client.post(f"/v1/payments/{payment_id}/cancel", headers=headers)


def payment(env: Env, payment_id: str) -> dict[str, Any]:
    response = env.client.get(f"/v1/payments/{payment_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def money(env: Env, merchant: str) -> tuple[int, int]:
    """(available, pending) of the merchant's account."""
    balance = env.balance(merchant)
    return balance["available_minor"], balance["pending_minor"]


def history(env: Env, payment_id: str) -> list[tuple[str | None, str, str]]:
    return [(step["from"], step["to"], step["cause"]) for step in payment(env, payment_id)["history"]]
