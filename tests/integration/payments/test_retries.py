"""Retrying `POST /v1/payments` with the same key, during and after each outcome: one payment,
one charge at the processor (SPEC §3.1, §6)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.integration.payments.conftest import TIMEOUT_MS, Env

OUTCOMES = {
    "succeeded": ("tok_ok", None, 201),
    "declined": ("tok_declined", None, 402),
    "request_lost": ("tok_ok", {"fault": "drop_request", "next_n": 1}, 202),
    "response_lost": ("tok_ok", {"fault": "drop_response", "next_n": 1}, 202),
    "error_500": ("tok_ok", {"fault": "error_500", "next_n": 1}, 202),
    "slow": ("tok_ok", {"fault": "delay_ms", "delay_ms": TIMEOUT_MS * 2, "next_n": 1}, 202),
    "pending": ("tok_pending", None, 202),
}


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_retry_after_replays_and_charges_once(env: Env, outcome: str) -> None:
    token, rule, status = OUTCOMES[outcome]
    merchant = env.account()
    if rule is not None:
        env.faults(rule)
    first = env.pay(merchant, token=token, key="k-after")
    assert first.status_code == status, first.text
    again = env.pay(merchant, token=token, key="k-after")
    assert again.status_code == status
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    env.resolve()
    third = env.pay(merchant, token=token, key="k-after")
    assert third.json() == first.json()  # the original response, even after resolution
    listed = env.client.get("/v1/payments").json()["data"]
    assert [item["id"] for item in listed] == [first.json()["id"]]
    assert env.charges_at_sandbox() == 1  # a lost request was re-sent by the resolver: still one charge


@pytest.mark.parametrize(("delay_ms", "status"), [(TIMEOUT_MS // 2, 201), (TIMEOUT_MS * 2, 202)])
def test_retry_during_waits_for_the_first_and_replays(env: Env, delay_ms: int, status: int) -> None:
    """Duplicates sent while the first request waits on a slow processor (answering in time,
    or past the timeout) wait for its answer and replay it."""
    merchant = env.account()
    env.faults({"fault": "delay_ms", "delay_ms": delay_ms, "next_n": 1})
    answers: list[Any] = []

    def pay() -> None:
        answers.append(env.pay(merchant, key="k-during"))

    threads = [threading.Thread(target=pay) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bodies = {response.text for response in answers}
    assert len(bodies) == 1, bodies
    assert {response.status_code for response in answers} == {status}
    assert sorted(response.headers.get("Idempotent-Replayed", "false") for response in answers) == [
        "false",
        "true",
        "true",
        "true",
    ]
    assert env.charges_at_sandbox() == 1
    assert len(env.client.get("/v1/payments").json()["data"]) == 1


def test_same_key_other_request_is_409(env: Env) -> None:
    merchant = env.account()
    assert env.pay(merchant, key="k-reuse", amount_minor=100).status_code == 201
    response = env.pay(merchant, key="k-reuse", amount_minor=200)
    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_key_reused"
    assert env.charges_at_sandbox() == 1


def test_missing_key_is_400(env: Env) -> None:
    merchant = env.account()
    response = env.client.post(
        "/v1/payments",
        json={
            "amount_minor": 5,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": merchant,
        },
    )
    assert response.status_code == 400
    assert response.json()["error"] == "idempotency_key_required"


@pytest.mark.parametrize("amount", [True, 1.0, "5", None, 0, -1, 2**53])
def test_bad_amount_is_400_and_nothing_happens(env: Env, amount: Any) -> None:
    merchant = env.account()
    response = env.client.post(
        "/v1/payments",
        json={
            "amount_minor": amount,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": merchant,
        },
        headers={"Idempotency-Key": "k-bad"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_amount"
    assert env.charges_at_sandbox() == 0


def test_unknown_destination_is_404_and_the_key_stays_free(env: Env) -> None:
    response = env.pay("acct_missing", key="k-missing")
    assert response.status_code == 404
    merchant = env.account()
    body = {
        "amount_minor": 1000,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": merchant,
    }
    retry = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-missing"})
    assert retry.status_code == 201
    assert env.charges_at_sandbox() == 1


def test_currency_mismatch_is_a_recorded_refusal(env: Env) -> None:
    merchant = env.account()
    body = {
        "amount_minor": 5,
        "currency": "EUR",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": merchant,
    }
    first = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-eur"})
    assert first.status_code == 422
    assert first.json()["error"] == "currency_mismatch"
    again = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-eur"})
    assert again.status_code == 422
    assert again.headers["Idempotent-Replayed"] == "true"
    assert env.charges_at_sandbox() == 0


def test_tenants_are_isolated(env: Env) -> None:
    merchant = env.account()
    payment = env.pay(merchant).json()
    other = env.client.get(f"/v1/payments/{payment['id']}", headers={"Paycore-Tenant": "other"})
    assert other.status_code == 404
    assert other.json()["error"] == "payment_not_found"
    assert env.client.get("/v1/payments", headers={"Paycore-Tenant": "other"}).json()["data"] == []
