"""An approver is never offered what they may not do, in a real browser (tests/e2e/
test_console_browser.py's fixtures and screenshots): bob asks for a refund and his page of it
has no Approve button, only the note that another approver approves it and his Cancel; carol's
page of it has Approve, and she approves it."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_console_browser import Console, backend, chromium, console, flash

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow


def test_the_requester_sees_no_approve_button_a_second_approver_does(console: Console) -> None:
    merchant = console.account()
    payment = console.paid(merchant, 5000)
    console.refunds_wait_and_doubts_resolve_by_hand()

    bob = console.signed_in("bob")
    console.visit(bob, f"/ops/payments/{payment['id']}", "payment")
    bob.fill("#refund-form input[name=amount]", "12.00")
    console.submit(bob, bob.get_by_role("button", name="Request refund"), "refund-requested")
    found = re.search(r"/ops/refunds/(rf_[0-9A-Z]+)", bob.url)
    assert found is not None, bob.url
    refund_page = f"/ops/refunds/{found.group(1)}"
    assert bob.get_by_role("button", name="Approve").count() == 0
    assert "another approver approves it" in bob.inner_text("#approval")
    assert bob.get_by_role("button", name="Cancel").count() == 1
    console.visit(bob, "/ops/approvals", "approvals-bob")
    assert bob.get_by_role("button", name="Approve").count() == 0

    carol = console.signed_in("carol")
    console.visit(carol, "/ops/approvals", "approvals-carol")
    assert carol.get_by_role("button", name="Approve").count() == 1
    console.visit(carol, refund_page, "refund-carol")
    approved = console.submit(carol, carol.get_by_role("button", name="Approve"), "approved")
    assert approved.status == 303 and "Refund approved" in flash(carol), flash(carol)
    assert console.api("GET", f"/v1{refund_page.removeprefix('/ops')}").body["status"] != "requires_approval"
