"""A payout's page in a real browser (tests/e2e/test_console_browser.py's fixtures and
screenshots): the bank details masked, a scheduled payout canceled by an operator, a sent one
asked about at the bank again."""

from __future__ import annotations

import pytest

from tests.e2e.test_console_browser import Console, backend, chromium, console, flash
from tests.support import payouts as payout_support
from tests.support.payouts import ACH

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow


def test_an_operator_cancels_a_scheduled_payout_and_asks_the_bank_about_a_sent_one(console: Console) -> None:
    source = payout_support.funded_source(console.database, "acme", 900_000)
    scheduled = payout_support.schedule(console.database, "acme", source, 250_000)
    sent = payout_support.schedule(console.database, "acme", source, 1_000)
    payout_support.move(console.database, sent, "queued", "processing", "sent", bank_reference="bank-ref-1")

    alice = console.signed_in("alice")
    console.visit(alice, f"/ops/payouts/{scheduled.id}", "scheduled")
    assert alice.inner_text("#bank-account") == "•••• 6789"
    assert alice.inner_text("#bank-code") == "110000000"
    assert alice.inner_text("#source-account") == source
    assert "2,500.00 USD" in alice.inner_text("dl.facts")
    assert ACH.account_number is not None and ACH.account_number not in alice.content()
    canceled = console.submit(alice, alice.get_by_role("button", name="Cancel payout"), "canceled")
    assert canceled.status == 303 and "Payout canceled" in flash(alice), flash(alice)
    assert "canceled" in alice.inner_text("h1 .badge")
    assert alice.get_by_role("button", name="Cancel payout").count() == 0
    assert console.api("GET", f"/v1/payouts/{scheduled.id}").body["status"] == "canceled"

    console.visit(alice, f"/ops/payouts/{sent.id}", "sent")
    assert alice.get_by_role("button", name="Cancel payout").count() == 0
    asked = console.submit(alice, alice.get_by_role("button", name="Ask the bank again now"), "asked")
    assert asked.status == 303 and "asks the bank" in flash(alice), flash(alice)


def test_the_audit_log_is_one_line_per_event_with_its_details_folded(console: Console) -> None:
    source = payout_support.funded_source(console.database, "acme", 900_000)
    payout = payout_support.schedule(console.database, "acme", source, 1_000)
    alice = console.signed_in("alice")
    console.visit(alice, f"/ops/payouts/{payout.id}", "payout")
    console.submit(alice, alice.get_by_role("button", name="Cancel payout"), "canceled")
    console.paid(console.account(), 2500)
    console.visit(alice, "/ops/audit", "audit")
    rows = alice.locator("#results tr:has(td.when)")
    assert rows.count() >= 5
    heights = [rows.nth(index).bounding_box()["height"] for index in range(rows.count())]
    assert max(heights) - min(heights) < 4, heights  # each event one line: none wraps, none is broken
    assert "payout.canceled" in alice.inner_text("#results") or "canceled" in alice.inner_text("#results")
    assert alice.locator(f'#results a[href="/ops/payouts/{payout.id}"]').count() >= 1
    width = alice.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, width  # every line fits the window: no id is broken to make it fit
    alice.locator("#results details summary").first.click()
    assert alice.locator("#results details[open] pre").first.is_visible()
    console.shot(alice, "audit-details-open")
    height = alice.evaluate("document.documentElement.scrollHeight")
    assert height < 3000, height  # not a 7,000 px table
