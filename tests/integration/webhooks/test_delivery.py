"""Issue 21: every state change reaches the endpoints that take its type, signed, at least
once, through a real receiver that can fail, time out or close the connection."""

from __future__ import annotations

import json
from typing import Any

from paycore.webhooks.verify import WebhookSignatureError, verify_event
from tests.integration.webhooks.support import Env


def only_event(env: Env, **params: Any) -> dict[str, Any]:
    found = env.events(**params)
    assert len(found) == 1, found
    return found[0]


def test_a_state_change_reaches_the_endpoint_signed_with_the_object_after_it(env: Env) -> None:
    made = env.endpoint()
    payout_id = env.payout()

    assert env.deliver() == 1

    [got] = env.receiver.delivered()
    event = verify_event(got.body, got.headers["paycore-signature"], made["secret"])
    assert set(event) >= {"id", "type", "created_at", "data"}
    assert (event["type"], event["data"]["id"], event["data"]["status"]) == ("payout.scheduled", payout_id, "scheduled")
    assert event["data"]["object"] == "payout" and event["sequence"] == 1
    assert event["id"].startswith("evt_") and got.headers["paycore-event-id"] == event["id"]
    assert got.headers["paycore-delivery-id"].startswith("whd_")
    listed = only_event(env, object_id=payout_id)
    assert (listed["id"], listed["data"], listed["sequence"]) == (event["id"], event["data"], 1)
    [delivery] = env.deliveries(event["id"])
    assert (delivery["id"], delivery["status"], delivery["endpoint_id"]) == (
        got.headers["paycore-delivery-id"],
        "delivered",
        made["id"],
    )
    [attempt] = delivery["attempts"]
    assert (attempt["outcome"], attempt["status_code"], attempt["error"]) == ("delivered", 200, None)
    assert attempt["latency_ms"] >= 0 and attempt["response_excerpt"] == '{"received":true}'


def test_failures_are_retried_until_delivered_and_every_attempt_is_recorded(env: Env) -> None:
    env.endpoint()
    env.receiver.answer("error_500", "close", "error_500")
    env.payout()
    event = only_event(env, type="payout.scheduled")

    for _ in range(10):
        env.deliver()
        if env.receiver.delivered():
            break

    assert len(env.receiver.delivered()) == 1
    assert len(env.receiver.received) == 4
    assert len({got.headers["paycore-delivery-id"] for got in env.receiver.received}) == 1
    [delivery] = env.deliveries(event["id"])
    assert (delivery["status"], delivery["attempts_made"]) == ("delivered", 4)
    outcomes = [(a["attempt"], a["outcome"], a["status_code"]) for a in delivery["attempts"]]
    assert outcomes == [(1, "failed", 500), (2, "failed", None), (3, "failed", 500), (4, "delivered", 200)]
    assert delivery["attempts"][0]["error"] == "http_500" and delivery["attempts"][1]["error"]


def test_a_receiver_that_times_out_is_tried_again(env: Env) -> None:
    env.receiver.hang_s = 3
    env.endpoint()
    env.receiver.answer("timeout")
    env.payout()

    env.deliver()
    assert env.receiver.delivered() == []
    for _ in range(5):
        if env.deliver() and env.receiver.delivered():
            break

    event = only_event(env, type="payout.scheduled")
    [delivery] = env.deliveries(event["id"])
    first, second = delivery["attempts"]
    assert (first["outcome"], first["status_code"], first["error"]) == ("failed", None, "timeout")
    assert 900 <= first["latency_ms"] < 3_000  # bounded by the 1 s timeout, not the receiver's 3 s
    assert (second["outcome"], delivery["status"]) == ("delivered", "delivered")


def test_an_endpoint_gets_the_types_it_takes_only_and_events_carry_a_sequence(env: Env) -> None:
    env.endpoint(events=["payout.canceled"])
    payout_id = env.payout()
    env.cancel(payout_id)

    env.deliver()

    [got] = env.receiver.delivered()
    body = json.loads(got.body)
    assert (body["type"], body["data"]["status"], body["sequence"]) == ("payout.canceled", "canceled", 2)
    ordered = env.events(object_id=payout_id)
    assert [(e["type"], e["sequence"]) for e in ordered] == [("payout.scheduled", 1), ("payout.canceled", 2)]
    assert [e["type"] for e in env.events(type="payout.canceled")] == ["payout.canceled"]


def test_a_failing_endpoint_does_not_hold_up_another(env: Env) -> None:
    from tests.support.receiver import Receiver

    with Receiver() as dead:
        dead.default = "error_500"
        env.endpoint(url=dead.url)
        env.endpoint()
        for _ in range(3):
            env.payout()

        env.deliver()

        assert len(env.receiver.delivered()) == 3  # the healthy endpoint's whole batch
        assert len(dead.received) == 1  # one call a turn: its first failure ends the dead endpoint's turn


def test_the_helper_refuses_a_tampered_body_a_stale_timestamp_and_another_secret(env: Env) -> None:
    made = env.endpoint()
    env.payout()
    env.deliver()
    [got] = env.receiver.delivered()
    header = got.headers["paycore-signature"]
    signed_at = int(header.split(",")[0].removeprefix("t="))

    verify_event(got.body, header, made["secret"])
    for body, secret, now_s, code in (
        (got.body.replace(b"scheduled", b"canceled!"), made["secret"], None, "signature_invalid"),
        (got.body, "whsec_another", None, "signature_invalid"),
        (got.body, made["secret"], signed_at + 301, "signature_timestamp_out_of_tolerance"),
    ):
        try:
            verify_event(body, header, secret, now_s=now_s)
        except WebhookSignatureError as error:
            assert error.code == code
        else:
            raise AssertionError(f"accepted: {code}")
    try:
        verify_event(got.body, None, made["secret"])
    except WebhookSignatureError as error:
        assert error.code == "signature_missing"
