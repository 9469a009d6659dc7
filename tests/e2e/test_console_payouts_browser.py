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
