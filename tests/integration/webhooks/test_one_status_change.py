"""Issue 30: a webhook delivery's and an endpoint's status change through the lifecycle's one
status change (`lifecycle.transition.change`), as a payout's does, each with its record in the
same transaction: the attempt for a delivery delivered or failed, the endpoint's audit note
for an endpoint (and for its deliveries canceled with its deletion)."""

from __future__ import annotations

import dataclasses

import pytest

from paycore.audit import service as audit
from paycore.webhooks import rounds
from tests.integration.webhooks.support import TENANT, Env
from tests.support.transitions import watch


def notes(env: Env, endpoint_id: str) -> list[tuple[str, str]]:
    with env.database.read() as connection:
        events = audit.events_of(connection, TENANT, endpoint_id, limit=20)
    return [(event.type, event.cause) for event in events]


def test_deliveries_endpoints_and_payouts_change_status_in_one_place(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    made = env.endpoint()
    payout_id = env.payout()
    seen = watch(monkeypatch)

    assert env.deliver() == 1
    env.cancel(payout_id)  # a payout's move, and a payout.canceled delivery queued
    path = f"/v1/webhook_endpoints/{made['id']}"
    assert env.client.patch(path, json={"disabled": True}).json()["status"] == "disabled"
    assert env.client.patch(path, json={"disabled": False}).json()["status"] == "enabled"
    assert env.client.delete(path).status_code == 200

    assert [(table, move[1], changed) for table, move, changed in seen] == [
        ("webhook_deliveries", "delivered", 1),
        ("payouts", "canceled", 1),
        ("webhook_endpoints", "disabled", 1),
        ("webhook_endpoints", "enabled", 1),
        ("webhook_deliveries", "canceled", 1),  # the payout.canceled delivery, with the deletion
        ("webhook_endpoints", "deleted", 1),
    ]
    scheduled, canceled = (env.events(type=kind)[0] for kind in ("payout.scheduled", "payout.canceled"))
    [delivered] = env.deliveries(scheduled["id"])
    assert [attempt["outcome"] for attempt in delivered["attempts"]] == ["delivered"]
    assert [(d["status"], d["attempts"]) for d in env.deliveries(canceled["id"])] == [("canceled", [])]
    assert notes(env, made["id"]) == [
        ("webhook_endpoint.disabled", "tenant"),
        ("webhook_endpoint.enabled", "tenant"),
        ("webhook_endpoint.deleted", "tenant"),
    ]


def test_a_delivery_given_up_and_an_endpoint_disabled_for_failing_change_in_one_place(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = env.endpoint()
    env.receiver.answer("error_500")
    env.payout()
    seen = watch(monkeypatch)
    config = dataclasses.replace(env.config, retry_window_ms=0, disable_after_ms=0)

    assert rounds.deliver_due(env.database, config, "test-worker", endpoints_max=1) == 1

    assert seen == [
        ("webhook_deliveries", ("pending", "failed"), 1),
        ("webhook_endpoints", ("enabled", "disabled"), 1),
    ]
    [event] = env.events(type="payout.scheduled")
    [failed] = env.deliveries(event["id"])
    assert (failed["status"], [a["outcome"] for a in failed["attempts"]]) == ("failed", ["failed"])
    assert notes(env, made["id"]) == [("webhook_endpoint.disabled", "failing")]
