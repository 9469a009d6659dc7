"""The processor's word on an authorization (SPEC §6.1, §10): the webhooks charge.captured,
charge.canceled, charge.expired and charge.requires_capture applied as evidence, and an expiry
learnt from the processor only, never from paycore's clock. Both transports, both databases."""

from __future__ import annotations

import time

from paycore.kit.clock import now_us
from tests.integration.payments.capture_support import authorized, cancel, capture, history, money, payment
from tests.integration.payments.conftest import Env

LATER_US = 3_000_000  # past tok_expires_quickly's 2-second lifetime


def test_expiry_comes_from_the_processor_webhook_and_releases_all(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 4000, token="tok_expires_quickly")
    env.deliver()  # charge.requires_capture: the payment is that already
    later_us = now_us() + LATER_US
    assert env.sandbox.settle_due(later_us) >= 1  # the processor expires it
    assert env.deliver(later_us) >= 1  # charge.expired
    body = payment(env, paid["id"])
    assert (body["status"], body["cancellation_reason"], body["amount_capturable_minor"]) == ("canceled", "expired", 0)
    assert history(env, paid["id"])[-1] == ("requires_capture", "canceled", "webhook")
    assert money(env, merchant) == (0, 0)
    refused = capture(env, paid["id"])
    assert (refused.status_code, refused.json()["payment"]["cancellation_reason"]) == (409, "expired")


def test_paycore_never_expires_an_authorization_on_its_own_clock(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 4000, token="tok_expires_quickly")
    time.sleep(2.2)  # past authorization_expires_at: paycore's clock alone proves nothing
    env.resolve()
    assert payment(env, paid["id"])["status"] == "requires_capture"
    assert money(env, merchant) == (0, 4000)


def test_capture_lost_then_expired_is_resolved_to_canceled_by_the_status_query(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 4000, token="tok_expires_quickly")
    env.faults({"fault": "drop_request", "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"]).json()["in_doubt_operation"] == "capture"
    time.sleep(2.2)  # the capture never arrived, and the authorization's lifetime ends
    env.resolve()  # the status query: expired (the same request sent again would be refused)
    body = payment(env, paid["id"])
    assert (body["status"], body["cancellation_reason"]) == ("canceled", "expired")
    assert history(env, paid["id"])[-1] == ("in_doubt", "canceled", "resolver")
    assert money(env, merchant) == (0, 0)


def test_lost_capture_answer_resolved_by_the_webhook(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    env.deliver()  # the authorization's own event first
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"], 4000).status_code == 202
    assert env.deliver() >= 1  # charge.captured
    resolved = payment(env, paid["id"])
    assert (resolved["status"], resolved["amount_captured_minor"]) == ("succeeded", 4000)
    assert history(env, paid["id"])[-1] == ("in_doubt", "succeeded", "webhook")
    assert money(env, merchant) == (4000, 0)
    env.resolve()
    assert money(env, merchant) == (4000, 0)  # moved once


def test_lost_cancel_answer_resolved_by_the_webhook(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["cancel"]})
    assert cancel(env, paid["id"]).status_code == 202
    assert env.deliver() >= 1
    body = payment(env, paid["id"])
    assert (body["status"], body["cancellation_reason"]) == ("canceled", "requested")
    assert money(env, merchant) == (0, 0)


def test_an_older_authorization_event_after_the_capture_is_stale_not_a_conflict(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 1000).status_code == 200
    assert env.deliver() >= 2  # charge.requires_capture, then charge.captured: both after the fact
    results = [event["cause"] for event in env.events(paid["id"], "webhook")]
    assert results == ["stale", "stale"]
    assert env.client.get("/v1/reconciliation/breaks").json()["data"] == []
    assert money(env, merchant) == (1000, 0)
