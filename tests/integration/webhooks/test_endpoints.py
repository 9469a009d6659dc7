"""Issue 21: a tenant's webhook endpoints over HTTP: the secret shown once, the SSRF guard,
rotation, disabling (by the tenant and for failing), deletion, redelivery, the metrics, and
tenant isolation."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any, cast

import pytest
from fastapi import FastAPI
from httpx2 import Response
from sqlalchemy import update

from paycore.kit.clock import now_us
from paycore.tenants import service as tenants
from paycore.webhooks import rounds
from paycore.webhooks.models import webhook_endpoints
from paycore.webhooks.verify import verify_event
from tests.integration.webhooks.support import TENANT, Env

OTHER = "other-tenant"


def post(env: Env, path: str, body: object = None, *, key: str | None = "k-1", tenant: str = TENANT) -> Response:
    headers = {"Paycore-Tenant": tenant}
    if key is not None:
        headers["Idempotency-Key"] = key
    return env.client.post(path, json=body, headers=headers)


def test_the_secret_is_in_the_creating_answer_only(env: Env) -> None:
    made = env.endpoint(events=["payout.scheduled", "payout.canceled", "payout.scheduled"])
    assert made["secret"].startswith("whsec_") and made["status"] == "enabled"
    assert made["events"] == ["payout.scheduled", "payout.canceled"]  # deduplicated, in order
    shown = env.get(f"/v1/webhook_endpoints/{made['id']}").json()
    listed = env.get("/v1/webhook_endpoints").json()["data"]
    assert "secret" not in shown and all("secret" not in endpoint for endpoint in listed)
    assert {key: shown[key] for key in ("id", "url", "events", "status")} == {
        key: made[key] for key in ("id", "url", "events", "status")
    }


def test_bad_input_is_a_clear_400_and_stores_nothing(env: Env) -> None:
    for body, code in (
        ({"url": env.receiver.url, "events": ["payment.exploded"]}, "invalid_event_types"),
        ({"url": env.receiver.url, "events": []}, "invalid_request"),
        ({"url": "ftp://example.com/hook", "events": ["*"]}, "invalid_webhook_url"),
        ({"url": "https://user:pw@example.com/hook", "events": ["*"]}, "invalid_webhook_url"),
        ({"url": "https://example.com/" + "a" * 2100, "events": ["*"]}, "invalid_request"),
    ):
        response = env.client.post("/v1/webhook_endpoints", json=body, headers={"Idempotency-Key": f"bad-{code}"})
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"] == code, response.text
    missing_key = env.client.post("/v1/webhook_endpoints", json={"url": env.receiver.url, "events": ["*"]})
    assert missing_key.json()["error"] == "idempotency_key_required"
    assert env.get("/v1/webhook_endpoints").json()["data"] == []


def test_outside_local_mode_private_addresses_and_plain_http_are_refused(env: Env) -> None:
    loopback = env.endpoint()  # registered in local mode, for development
    key = env.database.transaction(lambda c: tenants.issue_key(c, TENANT, now_us=now_us()))
    auth = {"Authorization": f"Bearer {key}"}
    for url in (
        env.receiver.url,
        "https://127.0.0.1/hook",
        "https://10.0.0.8/hook",
        "https://169.254.169.254/latest",
        "https://[::1]/hook",
        "https://localhost/hook",
        "http://example.com/hook",
    ):
        response = env.client.post(
            "/v1/webhook_endpoints", json={"url": url, "events": ["*"]}, headers={**auth, "Idempotency-Key": url}
        )
        assert (response.status_code, response.json()["error"]) == (400, "invalid_webhook_url"), url
    fine = env.client.post(
        "/v1/webhook_endpoints",
        json={"url": "https://hooks.example.com/paycore", "events": ["*"]},
        headers={**auth, "Idempotency-Key": "public"},
    )
    assert fine.status_code == 201, fine.text

    env.payout()  # delivery checks again: the loopback endpoint is now refused, nothing sent
    env.deliver()
    assert env.receiver.received == []
    event = env.client.get("/v1/events", headers=auth).json()["data"][0]
    attempts = [
        delivery["attempts"]
        for delivery in env.client.get(f"/v1/events/{event['id']}/deliveries", headers=auth).json()["data"]
        if delivery["endpoint_id"] == loopback["id"]
    ]
    assert [attempt["error"] for attempt in attempts[0]] == ["unsafe_address"]


def test_in_local_mode_internal_addresses_are_refused_and_the_worker_never_connects(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, finding 7: local mode adds loopback receivers, and every other rule of the guard
    holds there, at registration and at delivery."""
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "https://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "https://10.0.0.1/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://hooks.example.com/paycore",  # http: for a loopback receiver only
    ):
        response = post(env, "/v1/webhook_endpoints", {"url": url, "events": ["*"]}, key=url)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_webhook_url"), url

    # One endpoint registered before the guard held in local mode (its URL as it was stored
    # then), and one whose public-looking name resolves inside at delivery time.
    legacy = env.endpoint()
    env.database.transaction(
        lambda c: c.execute(
            update(webhook_endpoints)
            .where(webhook_endpoints.c.id == legacy["id"])
            .values(url="http://169.254.169.254/latest/meta-data/")
        )
    )
    rebinding = env.endpoint("https://hooks.example.com/paycore")
    resolve = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return resolve("10.0.0.1" if host == "hooks.example.com" else host, port, *args, **kwargs)

    connections: list[object] = []

    def create_connection(address: object, *args: object, **kwargs: object) -> socket.socket:
        connections.append(address)
        raise AssertionError("the worker must not connect")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    env.payout()
    assert env.deliver() == 2
    assert connections == [] and env.receiver.received == []
    [event] = env.events()
    errors = {
        delivery["endpoint_id"]: [a["error"] for a in delivery["attempts"]] for delivery in env.deliveries(event["id"])
    }
    assert errors == {legacy["id"]: ["unsafe_address"], rebinding["id"]: ["unsafe_address"]}


def test_a_rotated_secret_signs_beside_the_old_one_for_the_overlap(env: Env) -> None:
    made = env.endpoint()
    rotated = post(env, f"/v1/webhook_endpoints/{made['id']}/rotate_secret", key="rotate-1")
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()
    assert new["secret"] != made["secret"] and new["previous_secret_expires_at"] is not None
    env.payout()
    env.deliver()

    [got] = env.receiver.delivered()
    header = got.headers["paycore-signature"]
    assert header.count("v1=") == 2
    for secret in (made["secret"], new["secret"]):
        assert verify_event(got.body, header, secret)["type"] == "payout.scheduled"


def test_after_the_overlap_only_the_new_secret_signs(env: Env) -> None:
    cast(FastAPI, env.client.app).state.settings = replace(env.settings, webhook_secret_overlap_ms=0)
    made = env.endpoint()
    new = post(env, f"/v1/webhook_endpoints/{made['id']}/rotate_secret", key="rotate-0").json()
    env.payout()
    env.deliver()
    [got] = env.receiver.delivered()
    assert got.headers["paycore-signature"].count("v1=") == 1
    verify_event(got.body, got.headers["paycore-signature"], new["secret"])


def test_disabled_by_the_tenant_then_enabled_again(env: Env) -> None:
    made = env.endpoint()
    off = env.client.patch(f"/v1/webhook_endpoints/{made['id']}", json={"disabled": True}).json()
    assert (off["status"], off["disabled_reason"]) == ("disabled", "disabled by the tenant")
    env.payout()
    env.deliver()
    assert env.receiver.received == []  # not an endpoint of the event: disabled when it happened

    on = env.client.patch(f"/v1/webhook_endpoints/{made['id']}", json={"disabled": False}).json()
    assert (on["status"], on["disabled_reason"]) == ("enabled", None)
    env.payout()
    env.deliver()
    assert len(env.receiver.delivered()) == 1


def test_an_endpoint_failing_for_the_configured_time_is_disabled_and_says_why(env: Env) -> None:
    env.config = replace(env.config, disable_after_ms=0)
    env.receiver.default = "error_500"
    made = env.endpoint()
    env.payout()

    env.deliver()

    shown = env.get(f"/v1/webhook_endpoints/{made['id']}").json()
    assert shown["status"] == "disabled" and shown["consecutive_failures"] == 1
    assert shown["disabled_reason"].startswith("failing since ") and "http_500" in shown["disabled_reason"]
    metrics = env.client.get("/metrics").text
    assert "paycore_webhook_endpoints_disabled 1.0" in metrics
    assert 'paycore_webhook_deliveries_total{outcome="failed"} 1.0' in metrics
    oldest = f'paycore_webhook_oldest_undelivered_age_seconds{{endpoint_id="{made["id"]}",tenant_id="default"}}'
    assert oldest in metrics
    env.deliver()
    assert len(env.receiver.received) == 1  # nothing more is sent to a disabled endpoint


def test_a_deleted_endpoint_is_gone_and_its_pending_deliveries_canceled(env: Env) -> None:
    env.receiver.default = "error_500"
    made = env.endpoint()
    env.payout()
    env.deliver()
    assert env.client.delete(f"/v1/webhook_endpoints/{made['id']}").status_code == 200
    assert env.get(f"/v1/webhook_endpoints/{made['id']}").status_code == 404
    assert env.get("/v1/webhook_endpoints").json()["data"] == []
    event = env.events()[0]
    assert [d["status"] for d in env.deliveries(event["id"])] == ["canceled"]
    env.deliver()
    assert len(env.receiver.received) == 1


def test_redeliver_sends_the_event_again_now_under_a_new_delivery_id(env: Env) -> None:
    env.endpoint()
    env.payout()
    env.deliver()
    event = env.events()[0]

    first = post(env, f"/v1/events/{event['id']}/redeliver", key="again-1")
    again = post(env, f"/v1/events/{event['id']}/redeliver", key="again-1")
    assert first.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == first.json()
    env.deliver()

    received = env.receiver.delivered()
    assert len(received) == 2 and len({got.headers["paycore-delivery-id"] for got in received}) == 2
    assert {got.headers["paycore-event-id"] for got in received} == {event["id"]}
    assert [d["status"] for d in env.deliveries(event["id"])] == ["delivered", "delivered"]


def test_endpoints_and_events_are_invisible_to_other_tenants(env: Env) -> None:
    made = env.endpoint()
    env.payout()
    env.deliver()
    event = env.events()[0]

    assert env.get(f"/v1/webhook_endpoints/{made['id']}", OTHER).status_code == 404
    assert env.get("/v1/webhook_endpoints", OTHER).json()["data"] == []
    assert (
        env.client.patch(
            f"/v1/webhook_endpoints/{made['id']}", json={"disabled": True}, headers={"Paycore-Tenant": OTHER}
        ).status_code
        == 404
    )
    deleted = env.client.delete(f"/v1/webhook_endpoints/{made['id']}", headers={"Paycore-Tenant": OTHER})
    assert deleted.status_code == 404
    assert post(env, f"/v1/webhook_endpoints/{made['id']}/rotate_secret", tenant=OTHER).status_code == 404
    assert env.get("/v1/events", OTHER).json()["data"] == []
    assert env.get(f"/v1/events/{event['id']}", OTHER).status_code == 404
    assert env.get(f"/v1/events/{event['id']}/deliveries", OTHER).status_code == 404
    assert post(env, f"/v1/events/{event['id']}/redeliver", key="x", tenant=OTHER).status_code == 404

    env.endpoint(tenant=OTHER)  # another tenant's endpoint hears nothing of this tenant's events
    env.payout()
    env.deliver()
    assert len(env.receiver.delivered()) == 2  # this tenant's endpoint: two events; OTHER's: none
    assert all(got.headers["paycore-event-id"].startswith("evt_") for got in env.receiver.delivered())
    assert env.get("/v1/webhook_endpoints", OTHER).json()["data"][0]["consecutive_failures"] == 0


def test_a_delivery_given_up_after_the_retry_window_is_failed(env: Env) -> None:
    env.config = replace(env.config, retry_window_ms=0)
    env.receiver.default = "error_500"
    env.endpoint()
    env.payout()
    env.deliver()
    [delivery] = env.deliveries(env.events()[0]["id"])
    assert (delivery["status"], delivery["next_attempt_at"]) == ("failed", None)
    assert rounds.deliver_due(env.database, env.config, "w", endpoints_max=1) == 0
