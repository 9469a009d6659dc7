"""The console's search, an account's running balances and the amounts typed in major units in
the lists' filters and the settings' threshold, in headless Chromium (the fixtures and the
screenshots of `test_console_browser.py`: `test-artifacts/console/<test>-<step>-<what>.png`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.test_console_browser import Console, backend, chromium, console, flash, result_ids

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow


def search_from_the_header(console: Console, page: Any, query: str, label: str) -> None:
    page.fill("header form.search input[name=q]", query)
    with page.expect_navigation():
        page.locator("header form.search button").click()
    console.shot(page, label)


def test_search_from_the_header_finds_and_goes_to_objects(console: Console) -> None:
    merchant = console.account()
    body = {
        "amount_minor": 123_456,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": merchant,
        "metadata": {"order_id": "ORD-7781"},
    }
    reply = console.api("POST", "/v1/payments", body, key="order-7781")
    assert reply.status == 201, reply
    payment = reply.body
    alice = console.signed_in("alice")

    search_from_the_header(console, alice, "ORD-7781", "search-by-metadata")
    assert alice.url.startswith(f"{console.base_url}/ops/search?")
    assert payment["id"] in alice.inner_text("#results-payments")
    assert "metadata order_id" in alice.inner_text("#results-payments")
    assert "1,234.56 USD" in alice.inner_text("#results-payments")

    search_from_the_header(console, alice, "order-7781", "search-by-key")
    assert "idempotency key" in alice.inner_text("#results-payments")
    alice.click(f"#results-payments a:has-text('{payment['id']}')")
    alice.wait_for_url(f"{console.base_url}/ops/payments/{payment['id']}")

    search_from_the_header(console, alice, payment["id"], "search-by-id-redirected")
    assert alice.url == f"{console.base_url}/ops/payments/{payment['id']}"  # straight to its page

    search_from_the_header(console, alice, "ab", "search-too-short")
    assert "query_chars_min = 3" in flash(alice)
    search_from_the_header(console, alice, "nothing-like-this", "search-nothing")
    assert "Nothing matches" in alice.inner_text("#nothing-found")


def test_a_statement_shows_running_balances(console: Console) -> None:
    merchant = console.account()
    for amount_minor in (100_000, 250_050, 12_345):
        console.paid(merchant, amount_minor)
    alice = console.signed_in("alice")
    console.visit(alice, f"/ops/ledger/accounts/{merchant}", "statement-running-balance")
    running = alice.locator("#statement td.running").all_inner_texts()
    posted = console.api("GET", f"/v1/accounts/{merchant}/balance").body["posted_minor"]
    assert posted == 362_395
    assert running[-1] == "3,623.95 USD", running
    assert "1,000.00 USD" in running and "3,500.50 USD" in running, running


def test_amounts_typed_in_the_filters_and_the_threshold(console: Console) -> None:
    merchant = console.account()
    small, large = console.paid(merchant, 1_250), console.paid(merchant, 125_000)
    bob = console.signed_in("bob")
    console.visit(bob, "/ops/payments", "payments")
    bob.select_option("form.filters select[name=currency]", "USD")
    bob.fill("form.filters input[name=min]", "12.5")
    bob.fill("form.filters input[name=max]", "1,250.00")
    bob.get_by_role("button", name="Filter").click()
    bob.wait_for_url(re.compile(r"/ops/payments\?.*min=12.5"))
    console.shot(bob, "payments-amount-accepted")
    assert set(result_ids(bob)) == {small["id"], large["id"]}
    bob.fill("form.filters input[name=min]", "12.51")
    bob.get_by_role("button", name="Filter").click()
    bob.wait_for_url(re.compile(r"min=12.51"))
    assert result_ids(bob) == [large["id"]]

    bob.fill("form.filters input[name=min]", "12,50")
    bob.get_by_role("button", name="Filter").click()
    bob.wait_for_url(re.compile(r"min=12%2C50"))
    console.shot(bob, "payments-amount-refused")
    assert "min: the amount must be a number written like 12.34 (USD)" in flash(bob)
    assert bob.locator("form.filters input[name=min]").input_value() == "12,50"  # kept as typed

    console.visit(bob, "/ops/settings?tenant=acme", "settings")
    bob.fill("#change-settings input[name=refund_approval_threshold]", "1,000.00")
    saved = console.submit(bob, bob.get_by_role("button", name="Save"), "threshold-accepted")
    assert saved.status == 303, saved
    assert console.api("GET", "/v1/settings").body["refund_approval_threshold_minor"] == 100_000
    assert "1,000.00 USD" in bob.inner_text("#settings")
    bob.fill("#change-settings input[name=refund_approval_threshold]", "12.505")
    refused = console.submit(bob, bob.get_by_role("button", name="Save"), "threshold-refused")
    assert refused.status == 400, refused
    assert "USD has at most 2 decimals" in flash(bob)
    assert bob.locator("#change-settings input[name=refund_approval_threshold]").input_value() == "12.505"
    assert console.api("GET", "/v1/settings").body["refund_approval_threshold_minor"] == 100_000
