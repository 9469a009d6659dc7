"""Refunds of captured money only (SPEC §6.1): refundable_minor counts what was captured; an
authorization not captured is 409 payment_not_captured. Both transports, both databases."""

from __future__ import annotations

from typing import Any

from tests.integration.payments.capture_support import authorized, cancel, capture, money, payment
from tests.integration.payments.conftest import Env


def refund(env: Env, payment_id: str, amount_minor: int, key: str) -> Any:
    return env.client.post(
        f"/v1/payments/{payment_id}/refunds", json={"amount_minor": amount_minor}, headers={"Idempotency-Key": key}
    )


def test_a_partially_captured_payment_refunds_within_what_was_captured(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 3000).status_code == 200
    assert payment(env, paid["id"])["refundable_minor"] == 3000
    over = refund(env, paid["id"], 3001, "rf-over")
    assert (over.status_code, over.json()["error"], over.json()["refundable_minor"]) == (422, "over_refund", 3000)
    within = refund(env, paid["id"], 2000, "rf-1")
    assert within.status_code == 201, within.text
    assert payment(env, paid["id"])["refundable_minor"] == 1000
    rest = refund(env, paid["id"], 1001, "rf-2")
    assert (rest.status_code, rest.json()["error"]) == (422, "over_refund")
    assert refund(env, paid["id"], 1000, "rf-3").status_code == 201
    assert payment(env, paid["id"])["refundable_minor"] == 0
    available, _ = money(env, merchant)
    assert available == 0  # 3000 captured, all of it held or given back


def test_an_uncaptured_or_canceled_authorization_is_409_payment_not_captured(env: Env) -> None:
    merchant = env.account()
    open_one = authorized(env, merchant, 5000)
    response = refund(env, open_one["id"], 100, "rf-open")
    assert (response.status_code, response.json()["error"]) == (409, "payment_not_captured"), response.text
    canceled = authorized(env, merchant, 5000)
    assert cancel(env, canceled["id"]).status_code == 200
    response = refund(env, canceled["id"], 100, "rf-canceled")
    assert (response.status_code, response.json()["error"]) == (409, "payment_not_captured")
    assert money(env, merchant) == (0, 5000)  # nothing held for a refund; the open authorization's pending
