"""Authorize now (SPEC §6.1): `capture: "manual"` on POST /v1/payments, both transports, both
databases. The capture and cancel that follow: test_capture.py, test_cancel.py."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.kit.clock import now_us, parse_rfc3339
from tests.integration.payments.conftest import Env


def history(env: Env, payment_id: str) -> list[tuple[str | None, str, str]]:
    body = env.client.get(f"/v1/payments/{payment_id}").json()
    return [(step["from"], step["to"], step["cause"]) for step in body["history"]]


def test_manual_payment_is_authorized_and_held_pending(env: Env) -> None:
    merchant = env.account()
    before_us = now_us()
    response = env.pay(merchant, amount_minor=5000, capture="manual")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "requires_capture"
    assert (body["capture"], body["amount_capturable_minor"], body["amount_captured_minor"]) == ("manual", 5000, 0)
    assert type(body["amount_capturable_minor"]) is int and type(body["amount_captured_minor"]) is int
    assert (body["refundable_minor"], body["in_doubt_operation"], body["cancellation_reason"]) == (0, None, None)
    expires_us = parse_rfc3339(body["authorization_expires_at"])
    assert expires_us > before_us + 6 * 86_400_000_000  # the sandbox's default lifetime: 7 days
    # The authorization is the pending transfer: pending shows it, available never does.
    balance = env.balance(merchant)
    assert (balance["available_minor"], balance["pending_minor"]) == (0, 5000)
    assert history(env, body["id"]) == [
        (None, "processing", "api_request"),
        ("processing", "requires_capture", "processor_answer"),
    ]
    assert (
        env.client.get(f"/v1/payments/{body['id']}").json()["authorization_expires_at"]
        == (body["authorization_expires_at"])
    )
    events = env.client.get("/v1/events", params={"type": "payment.requires_capture"}).json()["data"]
    assert [(event["data"]["id"], event["data"]["status"]) for event in events] == [(body["id"], "requires_capture")]


def test_manual_payment_key_replays_and_is_its_own_request(env: Env) -> None:
    merchant = env.account()
    first = env.pay(merchant, capture="manual", key="auth-1")
    again = env.pay(merchant, capture="manual", key="auth-1")
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (201, "true")
    assert again.json() == first.json()
    reused = env.pay(merchant, key="auth-1")  # automatic: another request under the same key
    assert (reused.status_code, reused.json()["error"]) == (409, "idempotency_key_reused")
    assert env.charges_at_sandbox() == 1


def test_automatic_is_the_default_and_says_so(env: Env) -> None:
    merchant = env.account()
    explicit = env.pay(merchant, capture="automatic", key="auto-1")
    implicit = env.pay(merchant, key="auto-1")  # the same request: the default spelled out or not
    assert (explicit.status_code, implicit.status_code) == (201, 201)
    assert implicit.headers.get("Idempotent-Replayed") == "true"
    body = explicit.json()
    assert (body["status"], body["capture"]) == ("succeeded", "automatic")
    assert (body["amount_captured_minor"], body["amount_capturable_minor"]) == (1000, 0)
    assert body["authorization_expires_at"] is None


@pytest.mark.parametrize("capture", ["Manual", "", None, True, 1, ["manual"]])
def test_any_other_capture_is_refused_and_nothing_is_stored(env: Env, capture: Any) -> None:
    merchant = env.account()
    response = env.client.post(
        "/v1/payments",
        json={
            "amount_minor": 100,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": merchant,
            "capture": capture,
        },
        headers={"Idempotency-Key": "bad-capture"},
    )
    assert response.status_code == 400, response.text
    assert env.charges_at_sandbox() == 0
    assert env.client.get("/v1/payments").json()["data"] == []


def test_declined_authorization_fails_and_releases(env: Env) -> None:
    merchant = env.account()
    response = env.pay(merchant, token="tok_declined", capture="manual")
    assert response.status_code == 402, response.text
    body = response.json()
    assert (body["status"], body["failure_code"], body["amount_capturable_minor"]) == ("failed", "card_declined", 0)
    assert env.balance(merchant)["pending_minor"] == 0


def test_lost_authorization_answer_is_in_doubt_then_resolved_to_requires_capture(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "drop_response", "next_n": 1})
    response = env.pay(merchant, amount_minor=800, capture="manual")
    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["status"], body["in_doubt_operation"]) == ("in_doubt", "authorize")
    env.resolve()
    resolved = env.client.get(f"/v1/payments/{body['id']}").json()
    assert (resolved["status"], resolved["amount_capturable_minor"]) == ("requires_capture", 800)
    assert resolved["in_doubt_operation"] is None
    assert resolved["authorization_expires_at"] is not None
    assert env.balance(merchant)["pending_minor"] == 800
    assert env.charges_at_sandbox() == 1
