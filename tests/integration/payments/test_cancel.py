"""Cancel an authorization (SPEC §6.1): POST /v1/payments/{id}/cancel, both transports, both
databases."""

from __future__ import annotations

import pytest

from tests.integration.payments.capture_support import authorized, cancel, capture, history, money, payment
from tests.integration.payments.conftest import Env


def test_cancel_releases_all_of_the_authorization(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    response = cancel(env, paid["id"], key="can-1")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["cancellation_reason"]) == ("canceled", "requested")
    assert (body["amount_capturable_minor"], body["amount_captured_minor"], body["refundable_minor"]) == (0, 0, 0)
    assert money(env, merchant) == (0, 0)
    assert history(env, paid["id"])[-2:] == [
        ("requires_capture", "processing", "cancel_requested"),
        ("processing", "canceled", "processor_answer"),
    ]
    again = cancel(env, paid["id"], key="can-1")
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (200, "true")
    assert again.json() == body
    events = env.client.get("/v1/events", params={"type": "payment.canceled"}).json()["data"]
    assert [event["data"]["id"] for event in events] == [paid["id"]]


def test_cancel_once_captured_is_409_with_the_payment(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 1000).status_code == 200
    response = cancel(env, paid["id"])
    assert response.status_code == 409, response.text
    assert response.json()["error"] == "payment_not_cancelable"
    assert response.json()["payment"]["status"] == "succeeded"
    assert money(env, merchant) == (1000, 0)


def test_capture_once_canceled_is_409_and_a_cancel_again_too(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant)
    assert cancel(env, paid["id"]).status_code == 200
    refused = capture(env, paid["id"])
    assert (refused.status_code, refused.json()["error"]) == (409, "payment_not_capturable")
    assert refused.json()["payment"]["status"] == "canceled"
    assert cancel(env, paid["id"]).status_code == 409
    assert cancel(env, "pay_missing").status_code == 404
    assert env.client.post(f"/v1/payments/{paid['id']}/cancel").json()["error"] == "idempotency_key_required"
    assert money(env, merchant) == (0, 0)


@pytest.mark.parametrize("rule", ["drop_response", "drop_request"])
def test_lost_cancel_answer_is_in_doubt_then_resolved(env: Env, rule: str) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    env.faults({"fault": rule, "next_n": 1, "ops": ["cancel"]})
    response = cancel(env, paid["id"])
    assert response.status_code == 202, response.text
    assert (response.json()["status"], response.json()["in_doubt_operation"]) == ("in_doubt", "cancel")
    assert money(env, merchant) == (0, 5000)
    env.resolve()
    resolved = payment(env, paid["id"])
    assert (resolved["status"], resolved["cancellation_reason"]) == ("canceled", "requested")
    assert money(env, merchant) == (0, 0)
    assert refused_capture_after(env, paid["id"]) == 409


def refused_capture_after(env: Env, payment_id: str) -> int:
    return int(capture(env, payment_id).status_code)
