"""Capture later in the console (issue 40 point 4) in a real browser, as
tests/e2e/test_console_browser.py works the other pages (its fixtures, its Chromium, its
screenshots in `test-artifacts/console/`): an operator captures part of an authorization typed
in major units (a double click captures once) after a refused amount, and cancels another; the
lists filter the new statuses. What changed is checked through the API."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.test_console_browser import Console, backend, chromium, console, flash, result_ids

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow


def authorized(console: Console, merchant: str, amount_minor: int) -> dict[str, Any]:
    body = {
        "amount_minor": amount_minor,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": merchant,
        "capture": "manual",
    }
    reply = console.api("POST", "/v1/payments", body)
    assert (reply.status, reply.body["status"]) == (201, "requires_capture"), reply
    return dict(reply.body)


def balance(console: Console, merchant: str) -> tuple[int, int]:
    body = console.api("GET", f"/v1/accounts/{merchant}/balance").body
    return body["available_minor"], body["pending_minor"]


def test_an_operator_captures_part_of_an_authorization_once_for_a_double_click(console: Console) -> None:
    merchant = console.account()
    payment = authorized(console, merchant, 5000)
    alice = console.signed_in("alice")
    console.visit(alice, f"/ops/payments/{payment['id']}", "authorized")
    assert "requires_capture" in alice.inner_text("h1 .badge")
    assert alice.inner_text("#capturable") == "50.00 USD"
    assert re.search(r"\d+d \d+h left", alice.inner_text("#expires")), alice.inner_text("#expires")
    amount = alice.locator("#capture-form input[name=amount]")
    assert amount.input_value() == "50.00"  # all of it, unless the person types less

    amount.fill("12.345")
    refused = console.submit(alice, alice.get_by_role("button", name="Capture"), "capture-refused")
    assert refused.status == 400 and "USD has at most 2 decimals" in flash(alice), flash(alice)
    assert alice.locator("#capture-form input[name=amount]").input_value() == "12.345"  # as typed
    assert console.api("GET", f"/v1/payments/{payment['id']}").body["status"] == "requires_capture"

    alice.locator("#capture-form input[name=amount]").fill("12.34")
    posts: list[str] = []

    def count(sent: Any) -> None:
        if sent.method == "POST" and sent.url.endswith(f"/ops/payments/{payment['id']}/capture"):
            posts.append(sent.url)

    alice.on("request", count)
    button = alice.get_by_role("button", name="Capture")
    answer = console.submit(alice, button, "captured-double-click", double=True)
    alice.remove_listener("request", count)
    assert answer.status == 303, answer.status
    assert len(posts) in (1, 2), posts  # Chromium may fold the second submission into the first
    assert "Captured 12.34 USD; 37.66 USD released." in flash(alice), flash(alice)
    assert "succeeded" in alice.inner_text("h1 .badge")
    assert alice.inner_text("#captured") == "12.34 USD (released 37.66 USD)"
    after = console.api("GET", f"/v1/payments/{payment['id']}").body
    assert (after["status"], after["amount_captured_minor"], after["amount_capturable_minor"]) == ("succeeded", 1234, 0)
    steps = [(step["to"], step["actor"]) for step in after["history"]][-2:]
    assert steps == [("processing", "operator:alice"), ("succeeded", "operator:alice")], steps
    assert balance(console, merchant) == (1234, 0)  # captured once, the rest released
    print(f"the double click sent {len(posts)} POST(s) of the capture form")


def test_an_operator_cancels_an_authorization_and_the_lists_filter_the_new_statuses(console: Console) -> None:
    merchant = console.account()
    voided = authorized(console, merchant, 3000)
    waiting = authorized(console, merchant, 2000)
    bob = console.signed_in("bob")
    console.visit(bob, f"/ops/payments/{voided['id']}", "authorized")
    answer = console.submit(bob, bob.get_by_role("button", name="Cancel authorization"), "canceled")
    assert answer.status == 303 and "Authorization canceled: 30.00 USD released." in flash(bob), flash(bob)
    assert "canceled" in bob.inner_text("h1 .badge")
    assert bob.inner_text("#cancellation") == "requested: all 30.00 USD released"
    assert bob.locator("#capture-form").count() == 0
    after = console.api("GET", f"/v1/payments/{voided['id']}").body
    assert (after["status"], after["cancellation_reason"]) == ("canceled", "requested")
    assert after["history"][-1]["actor"] == "operator:bob"
    assert balance(console, merchant) == (0, 2000)  # the other authorization still pending

    for status, expected in (("canceled", voided), ("requires_capture", waiting)):
        console.visit(bob, "/ops/payments", f"payments-before-{status}")
        bob.select_option("select[name=status]", status)
        bob.get_by_role("button", name="Filter").click()
        bob.wait_for_url(re.compile(rf"/ops/payments\?status={status}"))
        console.shot(bob, f"payments-{status}")
        assert result_ids(bob) == [expected["id"]]


def test_a_capture_whose_answer_is_lost_shows_in_doubt_with_its_operation(console: Console) -> None:
    merchant = console.account()
    payment = authorized(console, merchant, 4000)
    plan = {
        "seed": 1,
        "hold_ms": 0,
        "settle_late_ms": 0,
        "rules": [{"fault": "error_500", "next_n": 1, "ops": ["capture"]}],
    }
    console.sandbox.set_fault_plan(plan)
    carol = console.signed_in("carol")
    console.visit(carol, f"/ops/payments/{payment['id']}", "authorized")
    carol.locator("#capture-form input[name=amount]").fill("15")
    answer = console.submit(carol, carol.get_by_role("button", name="Capture"), "capture-in-doubt")
    assert answer.status == 303 and "the payment is in doubt (capture)" in flash(carol), flash(carol)
    assert "in_doubt" in carol.inner_text("h1 .badge")
    assert carol.inner_text("#in-doubt-operation").startswith("capture")
    assert carol.locator("#capture-form").count() == 0  # nothing to capture until evidence ends the doubt
    console.visit(carol, "/ops/in-doubt", "in-doubt-queue")
    row = carol.locator("tr", has_text=payment["id"])
    assert "capture" in row.locator(".badge.in_doubt").inner_text()
    after = console.api("GET", f"/v1/payments/{payment['id']}").body
    assert (after["status"], after["in_doubt_operation"]) == ("in_doubt", "capture"), after
    assert balance(console, merchant) == (0, 4000)  # nothing moved on a guess
