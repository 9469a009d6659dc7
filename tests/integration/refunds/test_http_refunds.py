"""The refunds API (SPEC §3, §7.1) on both databases: creating, reading, listing, approving and
canceling refunds, the approval threshold, idempotency, and tenant isolation. Nothing here
involves the processor beyond taking the payment, so one transport is enough; the worker's
side is in test_refund_flow.py."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from sqlalchemy import func, select

from paycore.kit.clock import now_us
from paycore.refunds.models import refunds
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.refunds import support
from tests.integration.refunds.support import created, paid, refund

OTHER = {"Paycore-Tenant": "other"}


@pytest.fixture
def transport() -> str:
    return "inprocess"


def stored_refunds(env: Env) -> int:
    with env.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(refunds)).scalar_one())


def set_threshold(env: Env, threshold: object, headers: dict[str, str] | None = None) -> Any:
    return env.client.put("/v1/settings", json={"refund_approval_threshold_minor": threshold}, headers=headers)


def test_create_is_201_pending_and_holds_the_amount(env: Env) -> None:
    merchant, payment = paid(env)
    response = refund(env, payment, 300, reason="damaged in transit")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"].startswith("rf_")
    assert {key: body[key] for key in ("object", "payment", "amount_minor", "currency", "status", "reason")} == {
        "object": "refund",
        "payment": payment,
        "amount_minor": 300,
        "currency": "USD",
        "status": "pending",
        "reason": "damaged in transit",
    }
    assert (body["failure_code"], body["processor_reference"]) == (None, None)
    assert body["created_at"].endswith("Z") and body["updated_at"] == body["created_at"]
    assert [(step["from"], step["to"], step["cause"]) for step in body["history"]] == [
        (None, "pending", "refund_requested")
    ]
    assert support.get(env, body["id"]) == body
    shown = env.client.get(f"/v1/payments/{payment}").json()
    assert (shown["refunded_minor"], shown["refundable_minor"]) == (300, 700)
    assert support.money(env, merchant) == (1000, -300, 700)  # held: not available, not gone yet
    assert env.sandbox.get_refund(body["id"]) is None  # the worker sends it, not the request
    support.assert_ledger_verifies(env)


def test_over_refund_is_a_recorded_422_and_stores_nothing(env: Env) -> None:
    merchant, payment = paid(env)
    created(env, payment, 600)
    first = refund(env, payment, 401, key="k-over")
    assert first.status_code == 422, first.text
    body = first.json()
    assert (body["error"], body["param"], body["refundable_minor"]) == ("over_refund", "amount_minor", 400)
    again = refund(env, payment, 401, key="k-over")
    assert (again.status_code, again.json()) == (422, body)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert stored_refunds(env) == 1
    assert support.money(env, merchant) == (1000, -600, 400)
    assert refund(env, payment, 400).status_code == 201  # exactly what is left still fits
    assert refund(env, payment, 1).json()["error"] == "over_refund"
    assert support.refundable(env, payment) == 0
    support.assert_ledger_verifies(env)


def test_a_payment_that_has_not_succeeded_is_409_not_recorded(env: Env) -> None:
    merchant = env.account()
    declined = env.pay(merchant, token="tok_declined").json()["id"]
    for _ in range(2):
        response = refund(env, declined, 100, key="k-declined")
        assert response.status_code == 409
        assert (response.json()["error"], response.json()["status"]) == ("payment_not_refundable", "failed")
        assert "Idempotent-Replayed" not in response.headers
    assert stored_refunds(env) == 0


def test_not_found(env: Env) -> None:
    _, payment = paid(env)
    response = refund(env, "pay_missing", 100, key="k-missing")
    assert (response.status_code, response.json()["error"]) == (404, "payment_not_found")
    assert refund(env, payment, 100, key="k-missing").status_code == 201  # the key stayed free
    for path in ("/v1/refunds/rf_missing", "/v1/refunds/rf_missing/events"):
        response = env.client.get(path)
        assert (response.status_code, response.json()["error"]) == (404, "refund_not_found")
    for action in ("approve", "cancel"):
        response = env.client.post(f"/v1/refunds/rf_missing/{action}")
        assert (response.status_code, response.json()["error"]) == (404, "refund_not_found")
    response = env.client.get("/v1/payments/pay_missing/refunds")
    assert (response.status_code, response.json()["error"]) == (404, "payment_not_found")


def test_same_key_replays_and_another_request_with_it_is_409(env: Env) -> None:
    merchant, payment = paid(env)
    first = refund(env, payment, 250, key="k-same")
    again = refund(env, payment, 250, key="k-same")
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    other = refund(env, payment, 260, key="k-same")
    assert (other.status_code, other.json()["error"]) == (409, "idempotency_key_reused")
    assert stored_refunds(env) == 1
    assert support.money(env, merchant) == (1000, -250, 750)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"amount_minor": 0}, "invalid_amount"),
        ({"amount_minor": 1.0}, "invalid_amount"),
        ({"amount_minor": "5"}, "invalid_amount"),
        ({"amount_minor": True}, "invalid_amount"),
        ({"amount_minor": None}, "invalid_amount"),
        ({"amount_minor": 2**53}, "invalid_amount"),
        ({}, "invalid_amount"),
        ({"amount_minor": 5, "reason": "x" * 501}, "invalid_request"),
        ({"amount_minor": 5, "reason": ""}, "invalid_request"),
        ({"amount_minor": 5, "charge": "x"}, "invalid_request"),
    ],
)
def test_bad_bodies_are_400_and_change_nothing(env: Env, body: dict[str, Any], code: str) -> None:
    _, payment = paid(env)
    response = env.client.post(f"/v1/payments/{payment}/refunds", json=body, headers={"Idempotency-Key": "k-bad"})
    assert (response.status_code, response.json()["error"]) == (400, code)
    assert stored_refunds(env) == 0


def test_the_idempotency_key_is_required(env: Env) -> None:
    _, payment = paid(env)
    response = env.client.post(f"/v1/payments/{payment}/refunds", json={"amount_minor": 5})
    assert (response.status_code, response.json()["error"]) == (400, "idempotency_key_required")
    assert stored_refunds(env) == 0


def test_list_is_paginated_oldest_first(env: Env) -> None:
    _, payment = paid(env)
    ids = [created(env, payment, 100)["id"] for _ in range(3)]
    first = env.client.get(f"/v1/payments/{payment}/refunds", params={"limit": 2}).json()
    assert [item["id"] for item in first["data"]] == ids[:2]
    assert first["has_more"] is True
    assert "history" not in first["data"][0]
    rest = env.client.get(f"/v1/payments/{payment}/refunds", params={"limit": 2, "starting_after": ids[1]}).json()
    assert ([item["id"] for item in rest["data"]], rest["has_more"]) == (ids[2:], False)
    for limit in (0, 101):
        assert env.client.get(f"/v1/payments/{payment}/refunds", params={"limit": limit}).status_code == 400


WINDOW = {"manual_resolution_after_seconds": 259_200}  # the default manual window: 72 h


def test_settings_default_put_and_validation(env: Env) -> None:
    assert env.client.get("/v1/settings").json() == {"refund_approval_threshold_minor": None, **WINDOW}
    response = set_threshold(env, 500)
    assert (response.status_code, response.json()) == (200, {"refund_approval_threshold_minor": 500, **WINDOW})
    assert env.client.get("/v1/settings").json() == {"refund_approval_threshold_minor": 500, **WINDOW}
    assert env.client.get("/v1/settings", headers=OTHER).json() == {"refund_approval_threshold_minor": None, **WINDOW}
    for bad in (-1, 1.5, "5", True, 2**53):
        response = set_threshold(env, bad)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_amount"), bad
    response = env.client.put("/v1/settings", json={})
    assert response.status_code == 400
    assert set_threshold(env, None).json() == {"refund_approval_threshold_minor": None, **WINDOW}
    assert env.client.get("/v1/settings").json() == {"refund_approval_threshold_minor": None, **WINDOW}


def test_the_manual_window_is_set_kept_when_left_out_and_bounded(env: Env) -> None:
    put = env.client.put(
        "/v1/settings", json={"refund_approval_threshold_minor": 5, "manual_resolution_after_seconds": 60}
    )
    assert (put.status_code, put.json()) == (
        200,
        {"refund_approval_threshold_minor": 5, "manual_resolution_after_seconds": 60},
    )
    kept = set_threshold(env, 7)  # the window left out: unchanged
    assert kept.json() == {"refund_approval_threshold_minor": 7, "manual_resolution_after_seconds": 60}
    for bad in (-1, 1.5, "60", True, 31_536_001):
        body = {"refund_approval_threshold_minor": 7, "manual_resolution_after_seconds": bad}
        response = env.client.put("/v1/settings", json=body)
        assert (response.status_code, response.json().get("param")) == (400, "manual_resolution_after_seconds"), bad
    assert env.client.get("/v1/settings").json()["manual_resolution_after_seconds"] == 60


def test_above_the_threshold_waits_for_approval(env: Env) -> None:
    merchant, payment = paid(env)
    set_threshold(env, 500)
    small = created(env, payment, 500)
    assert small["status"] == "pending"  # "above" the threshold: 500 itself needs no approval
    big = created(env, payment, 400)
    assert big["status"] == "requires_approval"  # by sum: 500 + 400 is more than 500
    set_threshold(env, 0)
    waiting = created(env, payment, 100)
    assert waiting["status"] == "requires_approval"
    assert support.money(env, merchant) == (1000, -1000, 0)  # held while they wait, like any refund
    assert support.send(env) == 1  # the worker sends the pending one, not the waiting ones
    assert support.status_of(env, waiting["id"]) == "requires_approval"
    assert env.client.post(f"/v1/refunds/{big['id']}/approve").json()["status"] == "pending"
    assert support.send(env) == 1

    approved = env.client.post(f"/v1/refunds/{waiting['id']}/approve")
    assert (approved.status_code, approved.json()["status"]) == (200, "pending")
    assert support.history(env, waiting["id"])[-1] == ("requires_approval", "pending", "approved")
    again = env.client.post(f"/v1/refunds/{waiting['id']}/approve")
    assert (again.status_code, again.json()["error"], again.json()["status"]) == (
        409,
        "refund_state_conflict",
        "pending",
    )
    cancel = env.client.post(f"/v1/refunds/{waiting['id']}/cancel")
    assert (cancel.status_code, cancel.json()["status"]) == (409, "pending")
    assert support.send(env) == 1
    assert support.status_of(env, waiting["id"]) == "succeeded"
    assert support.money(env, merchant) == (0, 0, 0)
    support.assert_ledger_verifies(env)


def test_cancel_releases_the_amount_and_repeats_as_200(env: Env) -> None:
    merchant, payment = paid(env)
    set_threshold(env, 100)
    waiting = created(env, payment, 800)
    assert waiting["status"] == "requires_approval"
    assert support.refundable(env, payment) == 200
    canceled = env.client.post(f"/v1/refunds/{waiting['id']}/cancel")
    assert (canceled.status_code, canceled.json()["status"]) == (200, "canceled")
    assert support.refundable(env, payment) == 1000
    assert support.money(env, merchant) == (1000, 0, 1000)
    again = env.client.post(f"/v1/refunds/{waiting['id']}/cancel")
    assert (again.status_code, again.json()) == (200, canceled.json())
    approve = env.client.post(f"/v1/refunds/{waiting['id']}/approve")
    assert (approve.status_code, approve.json()["error"], approve.json()["status"]) == (
        409,
        "refund_state_conflict",
        "canceled",
    )
    assert support.send(env) == 0  # nothing to send
    support.assert_ledger_verifies(env)


def test_approve_with_a_key_replays(env: Env) -> None:
    _, payment = paid(env)
    set_threshold(env, 0)
    waiting = created(env, payment, 100)
    first = env.client.post(f"/v1/refunds/{waiting['id']}/approve", headers={"Idempotency-Key": "k-approve"})
    again = env.client.post(f"/v1/refunds/{waiting['id']}/approve", headers={"Idempotency-Key": "k-approve"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    other = env.client.post(f"/v1/refunds/{waiting['id']}/cancel", headers={"Idempotency-Key": "k-approve"})
    assert (other.status_code, other.json()["error"]) == (409, "idempotency_key_reused")


def test_tenants_are_isolated(env: Env) -> None:
    _, payment = paid(env)
    set_threshold(env, 0)
    mine = created(env, payment, 100)
    for path in (f"/v1/refunds/{mine['id']}", f"/v1/refunds/{mine['id']}/events"):
        response = env.client.get(path, headers=OTHER)
        assert (response.status_code, response.json()["error"]) == (404, "refund_not_found")
    response = env.client.get(f"/v1/payments/{payment}/refunds", headers=OTHER)
    assert (response.status_code, response.json()["error"]) == (404, "payment_not_found")
    response = refund(env, payment, 100, headers=OTHER)
    assert (response.status_code, response.json()["error"]) == (404, "payment_not_found")
    for action in ("approve", "cancel"):
        response = env.client.post(f"/v1/refunds/{mine['id']}/{action}", headers=OTHER)
        assert (response.status_code, response.json()["error"]) == (404, "refund_not_found")
    assert support.status_of(env, mine["id"]) == "requires_approval"
    assert stored_refunds(env) == 1
    assert env.client.get(f"/v1/payments/{payment}/refunds").json()["data"][0]["id"] == mine["id"]


def test_events_show_the_state_changes(env: Env) -> None:
    _, payment = paid(env)
    mine = created(env, payment, 100)
    support.send(env)
    changes = support.events(env, mine["id"], "state_change")
    assert [event["type"] for event in changes] == ["refund.pending", "refund.processing", "refund.succeeded"]
    calls = support.events(env, mine["id"], "processor_call")
    assert [(call["type"], call["cause"]) for call in calls] == [("processor.refund", "answered")]
    assert calls[0]["data"]["request"]["request_id"] == mine["id"]
    tenant_events = env.client.get("/v1/events", params={"limit": 100}).json()["data"]
    assert [e["type"] for e in tenant_events if e["object_id"] == mine["id"]] == [e["type"] for e in changes]


def test_a_hold_the_merchant_cannot_cover_is_a_recorded_422(env: Env) -> None:
    """A `no_overdraft` destination account must cover the refund's hold from its available
    balance: otherwise 422 insufficient_funds, recorded, and nothing reserved."""
    strict = env.client.post(
        "/v1/accounts",
        json={"code": "merchant.strict", "currency": "USD", "normal_balance": "credit", "no_overdraft": True},
        headers={"Idempotency-Key": "acct-strict"},
    ).json()["id"]
    payment = env.pay(strict, amount_minor=1000).json()["id"]
    paid_out = env.client.post(
        "/v1/transfers",
        json={
            "debit_account_id": strict,
            "credit_account_id": env.account("bank"),
            "amount_minor": 800,
            "currency": "USD",
        },
        headers={"Idempotency-Key": "payout-1"},
    )
    assert paid_out.status_code == 201, paid_out.text
    first = refund(env, payment, 500, key="k-strict")
    assert (first.status_code, first.json()["error"]) == (422, "insufficient_funds")
    again = refund(env, payment, 500, key="k-strict")
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (422, "true")
    assert support.refundable(env, payment) == 1000
    assert stored_refunds(env) == 0
    assert created(env, payment, 200)["status"] == "pending"


def test_with_api_keys_every_refund_route_needs_one_and_sees_its_tenant_only(env: Env) -> None:
    keys = {
        name: env.database.transaction(functools.partial(tenants.create_tenant, name=name, now_us=now_us())).api_key
        for name in ("acme", "globex")
    }
    acme, globex = ({"Authorization": f"Bearer {keys[name]}"} for name in ("acme", "globex"))
    account = env.client.post(
        "/v1/accounts",
        json={"code": "merchant", "currency": "USD", "normal_balance": "credit"},
        headers={**acme, "Idempotency-Key": "acct"},
    ).json()["id"]
    payment = env.client.post(
        "/v1/payments",
        json={
            "amount_minor": 1000,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": account,
        },
        headers={**acme, "Idempotency-Key": "pay"},
    ).json()["id"]
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 0}, headers=acme).status_code == 200
    mine = refund(env, payment, 100, headers=acme).json()
    assert mine["status"] == "requires_approval"
    routes = [
        ("POST", f"/v1/payments/{payment}/refunds"),
        ("GET", f"/v1/payments/{payment}/refunds"),
        ("GET", f"/v1/refunds/{mine['id']}"),
        ("GET", f"/v1/refunds/{mine['id']}/events"),
        ("POST", f"/v1/refunds/{mine['id']}/approve"),
        ("POST", f"/v1/refunds/{mine['id']}/cancel"),
        ("GET", "/v1/settings"),
        ("PUT", "/v1/settings"),
    ]
    for method, path in routes:
        body = {"refund_approval_threshold_minor": None} if method == "PUT" else {"amount_minor": 100}
        anonymous = env.client.request(method, path, json=body, headers={"Idempotency-Key": "anon"})
        assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthorized"), path
        if "settings" not in path:
            other = env.client.request(method, path, json=body, headers={**globex, "Idempotency-Key": "other"})
            assert other.status_code == 404, (path, other.text)
    assert env.client.get("/v1/settings", headers=globex).json() == {"refund_approval_threshold_minor": None, **WINDOW}
    assert env.client.get("/v1/settings", headers=acme).json() == {"refund_approval_threshold_minor": 0, **WINDOW}
    unchanged = env.client.get(f"/v1/refunds/{mine['id']}", headers=acme).json()
    assert unchanged["status"] == "requires_approval"
