"""Disputes in the console (issue 41 point 4) in a real browser, as tests/e2e/test_console_browser.py
works the other pages (its fixtures, its Chromium, its screenshots in `test-artifacts/console/`):
the queue, nearest evidence deadline first with the time left, filtered to the closed ones; a
dispute's page with its history and the payment's timeline; evidence typed in the form and sent
once for a double click; an accept above the approval threshold asked for by one person and
approved by another, never offered to the asker. Disputes are opened by the sandbox's admin call
and reach paycore by its real webhooks over HTTP; what changed is checked through the API."""

from __future__ import annotations

import dataclasses
import re
from http.client import HTTPConnection
from typing import Any

import pytest

from paycore_sandbox.disputes import OpenDisputeRequest
from tests.e2e.test_console_browser import Console, backend, chromium, console, flash

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow
DAY_MS = 86_400_000


def deliver(console: Console) -> int:
    """Every due sandbox webhook, posted to the served app as the sandbox would."""

    def sink(body: bytes, headers: dict[str, str]) -> int:
        connection = HTTPConnection("127.0.0.1", console.port, timeout=10)
        try:
            connection.request("POST", "/v1/webhooks/processor", body=body, headers=headers)
            return connection.getresponse().status
        finally:
            connection.close()

    return console.sandbox.deliver_due(sink)


def disputed(console: Console, merchant: str, amount_minor: int, window_ms: int = 7 * DAY_MS) -> dict[str, Any]:
    """A chargeback on a new payment (its evidence due `window_ms` after it opens), recorded."""
    settings = console.sandbox.settings
    console.sandbox.settings = dataclasses.replace(settings, dispute_evidence_window_ms=window_ms)
    payment = console.paid(merchant, amount_minor)
    console.sandbox.open_dispute(OpenDisputeRequest(payment["processor_reference"]))
    assert deliver(console) >= 1
    reply = console.api("GET", f"/v1/disputes?payment_id={payment['id']}")
    [listed] = reply.body["data"]
    return dict(listed)


def row_ids(page: Any) -> list[str]:
    return [text.strip() for text in page.locator("#results td:first-child code").all_inner_texts()]


def test_the_queue_and_a_disputes_page_with_evidence_sent_once(console: Console) -> None:
    merchant = console.account()
    later = disputed(console, merchant, 5000, 7 * DAY_MS)
    sooner = disputed(console, merchant, 1234, 2 * DAY_MS)
    closed = disputed(console, merchant, 800)
    assert console.api("POST", f"/v1/disputes/{closed['id']}/accept").status == 200

    alice = console.signed_in("alice")
    alice.get_by_role("link", name="Disputes").click()
    alice.wait_for_url(f"{console.base_url}/ops/disputes")
    console.shot(alice, "disputes")
    assert row_ids(alice) == [sooner["id"], later["id"]]  # nearest deadline first; the closed one not here
    first = alice.locator("#results tr", has_text=sooner["id"])
    assert "12.34 USD" in first.inner_text() and "fraudulent" in first.inner_text()
    assert re.fullmatch(r"1d 23h left", first.locator("td.left").inner_text()), first.inner_text()

    alice.select_option("select[name=status]", "closed")
    alice.get_by_role("button", name="Filter").click()
    alice.wait_for_url(re.compile(r"/ops/disputes\?status=closed"))
    console.shot(alice, "disputes-closed")
    assert row_ids(alice) == [closed["id"]] and "lost" in alice.inner_text("#results")

    console.visit(alice, "/ops/disputes", "disputes-again")
    alice.click(f"#results a:has-text('{later['id']}')")
    alice.wait_for_url(f"{console.base_url}/ops/disputes/{later['id']}")
    console.shot(alice, "dispute")
    assert "needs_response" in alice.inner_text("h1 .badge")
    assert "50.00 USD (fee 15.00 USD)" in alice.inner_text("#amount")
    assert re.search(r"6d 23h left", alice.inner_text("#due"))
    assert "needs_response" in alice.inner_text("#history")
    assert "processor.charge" in alice.inner_text("#timeline")

    alice.fill("#evidence-form textarea[name=text]", "signed delivery receipt, tracking 1Z999: winning_evidence")
    posts: list[str] = []

    def count(sent: Any) -> None:
        if sent.method == "POST" and sent.url.endswith(f"/ops/disputes/{later['id']}/evidence"):
            posts.append(sent.url)

    alice.on("request", count)
    answer = console.submit(
        alice, alice.get_by_role("button", name="Submit evidence"), "evidence-double-click", double=True
    )
    alice.remove_listener("request", count)
    assert answer.status == 303, answer.status
    assert len(posts) in (1, 2), posts  # Chromium may fold the second submission into the first
    assert "Evidence sent: the dispute is under_review." in flash(alice), flash(alice)
    assert "under_review" in alice.inner_text("h1 .badge") and alice.locator("#evidence-form").count() == 0
    after = console.api("GET", f"/v1/disputes/{later['id']}").body
    steps = [(step["to"], step["actor"]) for step in after["history"]]
    assert steps == [("needs_response", "processor"), ("under_review", "operator:alice")], steps
    print(f"the double click sent {len(posts)} POST(s) of the evidence form")


def test_an_accept_above_the_threshold_is_approved_by_a_second_person(console: Console) -> None:
    assert console.api("PUT", "/v1/settings", {"refund_approval_threshold_minor": 1000}).status == 200
    listed = disputed(console, console.account(), 5000)
    bob = console.signed_in("bob")
    console.visit(bob, f"/ops/disputes/{listed['id']}", "dispute")
    assert "Above the approval threshold of 10.00 USD" in bob.inner_text("#accept-form")
    asked = console.submit(bob, bob.get_by_role("button", name="Ask to accept"), "accept-asked")
    assert asked.status == 303 and "Accept asked for" in flash(bob), flash(bob)
    assert "operator:bob" in bob.inner_text("#approval")
    assert bob.get_by_role("button", name="Approve accept").count() == 0  # never offered to the asker
    refused = bob.context.request.post(
        f"/ops/disputes/{listed['id']}/accept/approve",
        form={"csrf_token": bob.locator("meta[name=csrf-token]").get_attribute("content")},
        max_redirects=0,
    )
    assert refused.status == 403 and "cannot also approve" in refused.text()
    no_csrf = bob.context.request.post(f"/ops/disputes/{listed['id']}/accept/approve", form={}, max_redirects=0)
    assert no_csrf.status == 403 and "CSRF" in no_csrf.text()
    assert console.api("GET", f"/v1/disputes/{listed['id']}").body["status"] == "needs_response"

    carol = console.signed_in("carol")
    console.visit(carol, "/ops/approvals", "approvals")
    row = carol.locator("#dispute-approvals tr", has_text=listed["id"])
    assert "operator:bob" in row.inner_text() and "50.00 USD" in row.inner_text()
    approved = console.submit(carol, row.get_by_role("button", name="Approve accept"), "accept-approved")
    assert approved.status == 303
    assert carol.url.startswith(f"{console.base_url}/ops/disputes/{listed['id']}?notice=")
    assert "Approved operator:bob's accept: the dispute is lost." in flash(carol), flash(carol)
    assert "lost" in carol.inner_text("h1 .badge")
    history = carol.inner_text("#history")
    assert "dispute.accept_requested" in history and "dispute.accept_approved" in history
    after = console.api("GET", f"/v1/disputes/{listed['id']}").body
    assert (after["history"][-1]["to"], after["history"][-1]["actor"]) == ("lost", "operator:carol")
    console.visit(carol, "/ops/approvals", "approvals-empty")
    assert "No dispute accept waits for approval." in carol.inner_text("#dispute-approvals")
