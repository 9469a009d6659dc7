"""The dispute's events reach the tenant (SPEC §10.1, §6.2; issue 41 point 4): `dispute.created`,
`dispute.updated` and `dispute.closed`, written to the outbox with each change, are delivered
by the worker's round to a webhook endpoint that takes them, signed, in order, each once, with
the dispute after the change. The real sandbox opens and decides the dispute; a real HTTP
receiver plays the tenant's server. Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from fastapi import FastAPI

from paycore.webhooks import rounds
from paycore.webhooks.verify import verify_event
from paycore.workers.jobs import webhook_config
from tests.integration.disputes.support import LATER_US, disputes_of, later, open_at_sandbox, paid
from tests.integration.payments.conftest import Env
from tests.support.receiver import Receiver

DISPUTE_EVENTS = ["dispute.created", "dispute.updated", "dispute.closed"]


@pytest.fixture
def transport() -> str:
    return "inprocess"  # the transports are test_answers.py's subject; here it is the outbox


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as found:
        yield found


def deliver_all(env: Env, rounds_max: int = 10) -> int:
    """The worker's delivery rounds until one delivers nothing (bounded)."""
    config = webhook_config(env.settings, cast(FastAPI, env.client.app).state.keyring.get())
    made = 0
    for _ in range(rounds_max):
        time.sleep(0.005)
        delivered = rounds.deliver_due(env.database, config, "test-worker", endpoints_max=4)
        if delivered == 0:
            return made
        made += delivered
    raise AssertionError(f"still delivering after {rounds_max} rounds")


def endpoint(env: Env, url: str, events: list[str]) -> dict[str, Any]:
    body = {"url": url, "events": events}
    response = env.client.post("/v1/webhook_endpoints", json=body, headers={"Idempotency-Key": f"we-{url}"})
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_created_updated_and_closed_reach_the_endpoint_signed_in_order(env: Env, receiver: Receiver) -> None:
    made = endpoint(env, receiver.url, DISPUTE_EVENTS)
    payment = paid(env, env.account(), 4000)
    open_at_sandbox(env, payment)
    assert env.deliver() >= 1  # the processor's dispute.created
    [listed] = disputes_of(env, payment["id"])
    body = {"text": "winning_evidence"}
    answered = env.client.post(f"/v1/disputes/{listed['id']}/evidence", json=body, headers={"Idempotency-Key": "e"})
    assert answered.status_code == 200, answered.text
    decided_at = later() + LATER_US
    env.sandbox.settle_due(decided_at)
    assert env.deliver(decided_at) >= 1  # the processor's dispute.closed (won)

    assert deliver_all(env) == 3

    events = [verify_event(got.body, got.headers["paycore-signature"], made["secret"]) for got in receiver.delivered()]
    assert [(e["type"], e["data"]["id"], e["data"]["status"]) for e in events] == [
        ("dispute.created", listed["id"], "needs_response"),
        ("dispute.updated", listed["id"], "under_review"),
        ("dispute.closed", listed["id"], "won"),
    ]
    assert all(e["data"]["object"] == "dispute" and "history" not in e["data"] for e in events)
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
    assert events[0]["data"]["amount_minor"] == 4000 and events[0]["data"]["payment_id"] == payment["id"]
    published = env.client.get("/v1/events", params={"object_id": listed["id"]}).json()["data"]
    assert sorted(e["id"] for e in published) == sorted(e["id"] for e in events)  # each once
    for event in events:
        [delivery] = env.client.get(f"/v1/events/{event['id']}/deliveries").json()["data"]
        assert (delivery["status"], delivery["endpoint_id"]) == ("delivered", made["id"])


def test_a_lost_dispute_closes_once_and_an_endpoint_for_other_types_gets_none(env: Env, receiver: Receiver) -> None:
    endpoint(env, receiver.url, ["dispute.closed"])
    with Receiver() as elsewhere:
        endpoint(env, elsewhere.url, ["payment.succeeded"])
        payment = paid(env, env.account(), 2500)
        open_at_sandbox(env, payment)
        assert env.deliver() >= 1
        [listed] = disputes_of(env, payment["id"])
        accepted = env.client.post(f"/v1/disputes/{listed['id']}/accept", headers={"Idempotency-Key": "acc"})
        assert accepted.status_code == 200 and accepted.json()["status"] == "lost", accepted.text
        env.deliver(later())  # the processor's own dispute.closed: already held, changes nothing

        deliver_all(env)

        assert not any(b"dispute." in got.body for got in elsewhere.delivered())
    [closed] = receiver.delivered()
    assert b'"dispute.closed"' in closed.body and listed["id"].encode() in closed.body
