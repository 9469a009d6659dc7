"""Every actor recorded; four eyes where money moves on a person's word (issue 28 §2): refund
approval, a refund asked for in the console, tenant scoping."""

from __future__ import annotations

import re
from typing import Any

from paycore.kit.money import format_minor
from tests.integration.ops.conftest import Console, act, csrf_of


def paid(console: Console, amount_minor: int = 1000) -> tuple[str, str]:
    """(merchant account, a succeeded payment)."""
    env = console.env
    merchant = env.account()
    payment = env.pay(merchant, amount_minor=amount_minor)
    assert payment.status_code == 201, payment.text
    return merchant, str(payment.json()["id"])


def history(console: Console, kind: str, object_id: str) -> list[tuple[str | None, str, str, str]]:
    body = console.env.client.get(f"/v1/{kind}/{object_id}").json()
    return [(step["from"], step["to"], step["cause"], step["actor"]) for step in body["history"]]


def refund_from_the_console(console: Console, who: str, payment_id: str, amount_minor: int, key: str) -> Any:
    browser = console.signed_in(who)
    page = f"/ops/payments/{payment_id}"
    data = {"amount": format_minor(amount_minor, "USD"), "reason": "customer asked", "idempotency_key": key}
    return browser, act(browser, f"{page}/refunds", data, page=page)


def refund_id_of(response: Any) -> str:
    found = re.match(r"/ops/refunds/(rf_[0-9A-Z]+)", response.headers["location"])
    assert found is not None, response.headers
    return found.group(1)


def test_a_refund_is_approved_by_a_second_person_never_by_a_key_or_its_requester(console: Console) -> None:
    env = console.env
    merchant, payment_id = paid(console)
    key_actor = history(console, "payments", payment_id)[0][3]
    assert re.fullmatch(r"api_key:key_[0-9A-Z]+", key_actor), key_actor  # never plain `api`
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 100}).status_code == 200
    bob, asked = refund_from_the_console(console, "bob", payment_id, 400, "bob-1")
    refund_id = refund_id_of(asked)
    assert env.client.get(f"/v1/refunds/{refund_id}").json()["status"] == "requires_approval"

    by_key = env.client.post(f"/v1/refunds/{refund_id}/approve")
    assert (by_key.status_code, by_key.json()["error"]) == (403, "operator_required")
    same = act(bob, f"/ops/refunds/{refund_id}/approve", page=f"/ops/refunds/{refund_id}")
    assert same.status_code == 403 and "cannot also approve" in same.text
    assert env.client.get(f"/v1/refunds/{refund_id}").json()["status"] == "requires_approval"  # nothing changed

    carol = console.signed_in("carol")
    approved = act(carol, f"/ops/refunds/{refund_id}/approve", page=f"/ops/refunds/{refund_id}")
    assert approved.status_code == 303
    assert history(console, "refunds", refund_id) == [
        (None, "requires_approval", "refund_requested", "operator:bob"),
        ("requires_approval", "pending", "approved", "operator:carol"),
    ]
    page = carol.get(f"/ops/refunds/{refund_id}").text
    assert "operator:bob" in page and "operator:carol" in page
    assert env.balance(merchant)["available_minor"] == 600  # held while it goes to the processor


def test_the_requester_or_an_approver_cancels_a_waiting_refund_an_operator_may_not(console: Console) -> None:
    env = console.env
    _, payment_id = paid(console)
    env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 0})
    alice, asked = refund_from_the_console(console, "alice", payment_id, 100, "alice-1")
    first = refund_id_of(asked)
    _, other = refund_from_the_console(console, "bob", payment_id, 100, "bob-2")
    second = refund_id_of(other)
    refused = act(alice, f"/ops/refunds/{second}/cancel", page=f"/ops/refunds/{second}")
    assert refused.status_code == 403  # an operator, not the requester
    assert act(alice, f"/ops/refunds/{first}/cancel", page=f"/ops/refunds/{first}").status_code == 303  # her own
    assert act(console.signed_in("carol"), f"/ops/refunds/{second}/cancel", page="/ops").status_code == 303
    statuses = {env.client.get(f"/v1/refunds/{rid}").json()["status"] for rid in (first, second)}
    assert statuses == {"canceled"}


def test_a_double_clicked_refund_form_makes_one_refund(console: Console) -> None:
    env = console.env
    _, payment_id = paid(console)
    browser = console.signed_in("alice")
    page = f"/ops/payments/{payment_id}"
    token = csrf_of(browser, page)
    form = re.search(r'name="idempotency_key" value="([^"]+)"', browser.get(page).text)
    assert form is not None
    data = {"csrf_token": token, "amount": "2.50", "reason": "dup", "idempotency_key": form.group(1)}
    first = browser.post(f"{page}/refunds", data=data)
    second = browser.post(f"{page}/refunds", data=data)  # the second click
    assert first.status_code == second.status_code == 303
    assert refund_id_of(first) == refund_id_of(second)
    listed = env.client.get(f"/v1/payments/{payment_id}/refunds").json()["data"]
    assert [refund["amount_minor"] for refund in listed] == [250]
    changed = browser.post(f"{page}/refunds", data={**data, "amount": "3.00"})  # same key, other amount
    assert changed.status_code == 409
    over = browser.post(f"{page}/refunds", data={**data, "amount": "9.00", "idempotency_key": "other"})
    assert over.status_code == 422 and "7.50 USD is refundable; 9.00 USD was typed." in over.text


def test_a_tenant_operator_sees_only_their_tenant(console: Console) -> None:
    env = console.env
    _, payment_id = paid(console)
    console.tenant("globex")
    console.operator("gina", "approver", tenant="globex")
    gina = console.signed_in("gina")
    assert gina.get(f"/ops/payments/{payment_id}").status_code == 404
    assert payment_id not in gina.get("/ops/payments").text
    assert payment_id in console.signed_in("vic").get("/ops/payments").text  # the platform's staff see it
    refused = act(gina, f"/ops/in-doubt/payment/{payment_id}/ask")
    assert refused.status_code == 404
    del env  # nothing else to check: acme's payment is unchanged by globex's operator


def test_a_threshold_change_is_audited_with_who_made_it(console: Console) -> None:
    env = console.env
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 5}).status_code == 200
    found = env.client.get("/v1/audit_events", params={"type": "settings.updated"}).json()["data"]
    [change] = found
    assert change["actor"].startswith("api_key:key_")
    assert change["data"]["from"]["refund_approval_threshold_minor"] is None
    assert change["data"]["to"]["refund_approval_threshold_minor"] == 5


def test_five_console_refunds_of_the_threshold_wait_after_the_first(console: Console) -> None:
    """Four eyes by sum: a refund split in the console's form still waits for a second person."""
    env = console.env
    _, payment_id = paid(console, amount_minor=5000)
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 1000}).status_code == 200
    found = []
    for number in range(5):
        _, asked = refund_from_the_console(console, "alice", payment_id, 1000, f"split-{number}")
        assert asked.status_code == 303, asked.text
        found.append(env.client.get(f"/v1/refunds/{refund_id_of(asked)}").json()["status"])
    assert found == ["pending"] + ["requires_approval"] * 4
    waiting = console.signed_in("bob").get("/ops/approvals").text
    assert waiting.count("/approve") == 4
