"""Capture later (SPEC §6.1): POST /v1/payments/{id}/capture, both transports, both databases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.payments.capture_support import authorized, capture, history, money, payment
from tests.integration.payments.conftest import Env


def test_capture_of_all_posts_the_authorization(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    response = capture(env, paid["id"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["amount_captured_minor"], body["amount_capturable_minor"]) == ("succeeded", 5000, 0)
    assert (body["refundable_minor"], body["in_doubt_operation"]) == (5000, None)
    assert money(env, merchant) == (5000, 0)
    assert history(env, paid["id"]) == [
        (None, "processing", "api_request"),
        ("processing", "requires_capture", "processor_answer"),
        ("requires_capture", "processing", "capture_requested"),
        ("processing", "succeeded", "processor_answer"),
    ]


def test_partial_capture_posts_part_and_releases_the_rest_in_one_step(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert money(env, merchant) == (0, 5000)
    response = capture(env, paid["id"], 3000)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["amount_captured_minor"], body["amount_capturable_minor"]) == ("succeeded", 3000, 0)
    assert body["refundable_minor"] == 3000
    assert money(env, merchant) == (3000, 0)  # the 2000 not captured is released, not posted
    assert payment(env, paid["id"])["amount_captured_minor"] == 3000


def test_capture_replays_under_its_key_and_a_second_capture_is_refused(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    first = capture(env, paid["id"], 1000, key="cap-a")
    again = capture(env, paid["id"], 1000, key="cap-a")
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (200, "true")
    assert again.json() == first.json()
    reused = capture(env, paid["id"], 2000, key="cap-a")
    assert (reused.status_code, reused.json()["error"]) == (409, "idempotency_key_reused")
    second = capture(env, paid["id"], 1000, key="cap-b")
    assert second.status_code == 409, second.text
    refused = second.json()
    assert refused["error"] == "payment_not_capturable"
    assert (refused["payment"]["status"], refused["payment"]["amount_captured_minor"]) == ("succeeded", 1000)
    assert money(env, merchant) == (1000, 0)  # money moved once


def test_more_than_capturable_is_422_and_changes_nothing(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    response = capture(env, paid["id"], 5001, key="too-much")
    assert (response.status_code, response.json()["error"]) == (422, "amount_too_large")
    assert capture(env, paid["id"], 5001, key="too-much").headers.get("Idempotent-Replayed") == "true"
    assert payment(env, paid["id"])["status"] == "requires_capture"
    assert money(env, merchant) == (0, 5000)
    assert capture(env, paid["id"], 5000).status_code == 200  # still capturable in full


@pytest.mark.parametrize("amount", [0, -1, 1.5, "100", True, 2**53, None])
def test_an_amount_that_is_not_a_positive_integer_is_400(env: Env, amount: Any) -> None:
    merchant = env.account()
    paid = authorized(env, merchant)
    response = env.client.post(
        f"/v1/payments/{paid['id']}/capture", json={"amount_minor": amount}, headers={"Idempotency-Key": "bad"}
    )
    assert (response.status_code, response.json()["error"]) == (400, "invalid_amount"), response.text
    assert payment(env, paid["id"])["status"] == "requires_capture"
    assert capture(env, paid["id"], 10, key="bad").status_code == 200  # a 400 is not recorded


def test_refusals_404_409_and_the_key_is_required(env: Env) -> None:
    merchant = env.account()
    missing = capture(env, "pay_nope")
    assert (missing.status_code, missing.json()["error"]) == (404, "payment_not_found")
    automatic = env.pay(merchant).json()
    refused = capture(env, automatic["id"])
    assert (refused.status_code, refused.json()["error"]) == (409, "payment_not_capturable")
    assert refused.json()["payment"]["status"] == "succeeded"
    paid = authorized(env, merchant)
    keyless = env.client.post(f"/v1/payments/{paid['id']}/capture", json={})
    assert (keyless.status_code, keyless.json()["error"]) == (400, "idempotency_key_required")


@pytest.mark.parametrize("rule", ["drop_response", "drop_request", "error_500"])
def test_lost_capture_answer_is_in_doubt_and_resolved_by_evidence(env: Env, rule: str) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    env.faults({"fault": rule, "next_n": 1, "ops": ["capture"]})
    response = capture(env, paid["id"], 2000)
    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["status"], body["in_doubt_operation"]) == ("in_doubt", "capture")
    assert money(env, merchant) == (0, 5000)  # not sure yet: still pending, never available
    env.resolve()
    resolved = payment(env, paid["id"])
    assert (resolved["status"], resolved["amount_captured_minor"], resolved["in_doubt_operation"]) == (
        "succeeded",
        2000,
        None,
    )
    assert money(env, merchant) == (2000, 0)
    assert history(env, paid["id"])[-2:] == [
        ("processing", "in_doubt", "processor_answer"),
        ("in_doubt", "succeeded", "resolver"),
    ]
    assert env.resolve() == 0
