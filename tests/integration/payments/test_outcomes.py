"""Every processor outcome, through both transports, on both databases (SPEC §6, §9, §10)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.integration.payments.conftest import TIMEOUT_MS, Env


def history(env: Env, payment_id: str) -> list[tuple[str | None, str, str]]:
    body = env.client.get(f"/v1/payments/{payment_id}").json()
    return [(step["from"], step["to"], step["cause"]) for step in body["history"]]


def status_of(env: Env, payment_id: str) -> str:
    return str(env.client.get(f"/v1/payments/{payment_id}").json()["status"])


def test_success_posts_the_money(env: Env) -> None:
    merchant = env.account()
    response = env.pay(merchant, amount_minor=1234)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "succeeded"
    assert body["amount_minor"] == 1234
    assert body["refundable_minor"] == 1234
    assert body["processor_reference"].startswith("ch_")
    assert env.balance(merchant)["available_minor"] == 1234
    assert history(env, body["id"]) == [
        (None, "processing", "api_request"),
        ("processing", "succeeded", "processor_answer"),
    ]
    assert env.charges_at_sandbox() == 1


@pytest.mark.parametrize(
    ("token", "code"), [("tok_declined", "card_declined"), ("tok_insufficient_funds", "insufficient_funds")]
)
def test_decline_is_402_and_voids_the_hold(env: Env, token: str, code: str) -> None:
    merchant = env.account()
    response = env.pay(merchant, token=token)
    assert response.status_code == 402, response.text
    body = response.json()
    assert (body["status"], body["failure_code"], body["error"]) == ("failed", code, code)
    assert body["message"]
    balance = env.balance(merchant)
    assert (balance["available_minor"], balance["pending_minor"]) == (0, 0)


def test_token_the_processor_refuses_fails_the_payment(env: Env) -> None:
    response = env.pay(env.account(), token="tok_no_such_token")
    assert response.status_code == 402
    assert response.json()["failure_code"] == "invalid_token"
    assert env.charges_at_sandbox() == 0


@pytest.mark.parametrize(
    ("rule", "charged_before_resolution"),
    [
        ({"fault": "drop_request", "next_n": 1}, 0),
        ({"fault": "drop_response", "next_n": 1}, 1),
        ({"fault": "error_500", "next_n": 1}, 0),
        ({"fault": "delay_ms", "delay_ms": TIMEOUT_MS * 2, "next_n": 1}, 1),
    ],
    ids=["request_lost", "response_lost", "error_500", "slow_past_timeout"],
)
def test_no_answer_is_in_doubt_then_resolved_by_evidence(
    env: Env, rule: dict[str, Any], charged_before_resolution: int
) -> None:
    merchant = env.account()
    env.faults(rule)
    response = env.pay(merchant, amount_minor=700)
    assert response.status_code == 202, response.text
    payment = response.json()
    assert payment["status"] == "in_doubt"
    # The merchant's available balance never includes money we are not sure of.
    balance = env.balance(merchant)
    assert (balance["available_minor"], balance["pending_minor"]) == (0, 700)
    assert env.charges_at_sandbox() == charged_before_resolution

    assert env.resolve() == 1
    assert status_of(env, payment["id"]) == "succeeded"
    assert env.charges_at_sandbox() == 1  # charged exactly once, even when the request was re-sent
    balance = env.balance(merchant)
    assert (balance["available_minor"], balance["pending_minor"]) == (700, 0)
    assert history(env, payment["id"])[-2:] == [
        ("processing", "in_doubt", "processor_answer"),
        ("in_doubt", "succeeded", "resolver"),
    ]
    assert env.resolve() == 0  # nothing left to do


def test_timeout_token_resolves_to_succeeded(env: Env) -> None:
    merchant = env.account()
    response = env.pay(merchant, token="tok_timeout")
    assert response.status_code == 202
    assert response.json()["status"] == "in_doubt"
    env.resolve()
    assert status_of(env, response.json()["id"]) == "succeeded"
    assert env.charges_at_sandbox() == 1


def test_declined_in_doubt_resolves_to_failed(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "drop_response", "next_n": 1})
    response = env.pay(merchant, token="tok_declined")
    assert response.status_code == 202
    env.resolve()
    body = env.client.get(f"/v1/payments/{response.json()['id']}").json()
    assert (body["status"], body["failure_code"]) == ("failed", "card_declined")
    assert env.balance(merchant)["pending_minor"] == 0


def test_processor_unreachable_for_good_stays_in_doubt_after_attempts_max(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "error_500", "percent": 100, "ops": ["charge", "get_charge"]})
    payment = env.pay(merchant).json()
    for _ in range(env.settings.resolver_attempts_max + 2):
        env.resolve()
    body = env.client.get(f"/v1/payments/{payment['id']}").json()
    assert body["status"] == "in_doubt"
    assert env.charges_at_sandbox() == 0
    queue = env.client.get("/v1/payments", params={"status": "in_doubt"}).json()
    assert [item["id"] for item in queue["data"]] == [payment["id"]]
    metrics = env.client.get("/metrics").text
    assert 'paycore_in_doubt_items{kind="payment"} 1.0' in metrics
    assert 'paycore_in_doubt_oldest_age_seconds{kind="payment"}' in metrics
    calls = env.events(payment["id"], "processor_call")
    assert len(calls) == 1 + env.settings.resolver_attempts_max  # the API's call, then one per attempt
    assert all(call["data"]["response"]["outcome"] == "unreachable" for call in calls)


def test_pending_answer_then_webhook_confirms(env: Env) -> None:
    merchant = env.account()
    response = env.pay(merchant, token="tok_pending")
    assert response.status_code == 202
    payment = response.json()
    assert payment["status"] == "processing"
    assert env.balance(merchant)["available_minor"] == 0
    later_us = time.time_ns() // 1000 + 10**9
    assert env.sandbox.settle_due(now_us=later_us) == 1
    assert env.deliver(later_us) == 2  # charge.pending, charge.succeeded
    assert status_of(env, payment["id"]) == "succeeded"
    assert env.balance(merchant)["available_minor"] == 1000


def test_duplicate_webhooks_change_nothing_twice(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "duplicate_webhook", "next_n": 1}, {"fault": "drop_response", "next_n": 1})
    payment = env.pay(merchant).json()
    assert payment["status"] == "in_doubt"
    env.deliver()
    env.deliver()
    assert status_of(env, payment["id"]) == "succeeded"
    webhooks = [
        e for e in env.client.get(f"/v1/payments/{payment['id']}/events").json()["data"] if e["kind"] == "webhook"
    ]
    assert [w["cause"] for w in webhooks] == ["applied"]  # the redelivery was a no-op, not even re-recorded
    assert env.balance(merchant)["available_minor"] == 1000


def test_out_of_order_webhooks_never_move_a_state_backwards(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "settle_late", "next_n": 1}, {"fault": "reorder_webhooks", "next_n": 1})
    payment = env.pay(merchant).json()
    assert payment["status"] == "processing"
    later_us = time.time_ns() // 1000 + 10**9
    env.sandbox.settle_due(now_us=later_us)
    for step in range(3):
        env.deliver(later_us + step * 10**8)
    assert status_of(env, payment["id"]) == "succeeded"
    causes = [
        e["cause"]
        for e in env.client.get(f"/v1/payments/{payment['id']}/events").json()["data"]
        if e["kind"] == "webhook"
    ]
    assert sorted(causes) == ["applied", "stale"]


def test_webhook_that_arrives_before_the_api_call_returns(env: Env) -> None:
    """The processor's webhook is applied while the API call still waits on the processor's
    (delayed) answer: the webhook moves the payment, the answer finds it moved. The delay is
    half the timeout; on a loaded machine the webhook may not get in within it, and then the
    scenario did not happen: it is tried again (at most SCENARIO_TRIES_MAX times), never passed."""
    for attempt in range(SCENARIO_TRIES_MAX):
        merchant = env.account(f"merchant.try{attempt}")
        response, webhook_first = _pay_while_the_webhook_arrives(env, merchant)
        if webhook_first:
            break
        while env.deliver():  # the late webhook of the try that did not count
            pass
    assert webhook_first, f"the webhook never arrived while the call waited, in {SCENARIO_TRIES_MAX} tries"
    assert response.status_code == 201, response.text
    steps = history(env, response.json()["id"])
    assert steps == [(None, "processing", "api_request"), ("processing", "succeeded", "webhook")]
    assert env.balance(merchant)["available_minor"] == 1000


SCENARIO_TRIES_MAX = 3


def _pay_while_the_webhook_arrives(env: Env, merchant: str) -> tuple[Any, bool]:
    """(the API's answer, whether the webhook was delivered while the call was still waiting)."""
    env.faults({"fault": "delay_ms", "delay_ms": TIMEOUT_MS // 2, "next_n": 1})
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(env.pay(merchant)))
    charged_before = env.charges_at_sandbox()
    caller.start()
    deadline = time.monotonic() + 5
    while env.charges_at_sandbox() == charged_before and time.monotonic() < deadline:
        time.sleep(0.01)
    while env.deliver() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    webhook_first = caller.is_alive()
    caller.join()
    return answers[0], webhook_first


def test_webhook_for_an_unknown_payment_is_kept_and_retried(env: Env) -> None:
    from paycore.kit.signing import sign

    body = (
        b'{"id":"evt_sbx_1","type":"charge.succeeded","created_at":"2026-11-29T00:00:00Z","sequence":2,'
        b'"data":{"object":"charge","request_id":"pay_UNKNOWN","merchant_id":"default","status":"succeeded",'
        b'"amount_minor":5,"currency":"USD","processor_charge_id":"ch_1"}}'
    )
    headers = {"Paycore-Signature": sign(env.settings.processor_webhook_secret, int(time.time()), body)}
    response = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
    assert response.status_code == 200
    assert response.json()["result"] == "unmatched"
    again = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
    assert again.json()["result"] == "duplicate"


@pytest.mark.parametrize(
    "signature",
    [None, "t=1,v1=00", "garbage", "t={now},v1=deadbeef"],
)
def test_badly_signed_webhooks_are_400_and_store_nothing(env: Env, signature: str | None) -> None:
    body = b'{"id":"evt_x"}'
    headers = {} if signature is None else {"Paycore-Signature": signature.format(now=int(time.time()))}
    response = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] in ("invalid_signature", "signature_timestamp_out_of_tolerance")


def test_each_change_is_published_with_the_payment_after_it_in_sequence(env: Env) -> None:
    """Issue 21: `GET /v1/events` (what webhooks deliver) holds each state change with the
    payment as it was after it, numbered per payment."""
    destination = env.account()
    paid = env.pay(destination, amount_minor=1999).json()
    declined = env.pay(destination, token="tok_declined").json()

    def published(payment_id: str) -> list[tuple[str, int, str, Any]]:
        events = env.client.get("/v1/events", params={"object_id": payment_id}).json()["data"]
        return [(e["type"], e["sequence"], e["data"]["status"], e["data"]["failure_code"]) for e in events]

    assert published(paid["id"]) == [
        ("payment.processing", 1, "processing", None),
        ("payment.succeeded", 2, "succeeded", None),
    ]
    assert published(declined["id"]) == [
        ("payment.processing", 1, "processing", None),
        ("payment.failed", 2, "failed", "card_declined"),
    ]
    last = env.client.get("/v1/events", params={"object_id": paid["id"], "type": "payment.succeeded"}).json()["data"]
    snapshot = {key: value for key, value in paid.items() if key != "history"}
    assert last[0]["data"] == snapshot  # the API's payment, as the creating request answered it
