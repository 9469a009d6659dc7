"""Disputes in the console (issue 41 point 4): the queue, nearest evidence deadline first with
the time left; a dispute's page with its history and the payment's timeline; evidence sent
through the API's own domain function (`disputes.answers`) once per form, as the person; what
is refused (CSRF, too long, not found); a lost answer shown waiting for the processor; the
reconciliation break's link. Disputes are opened by the real sandbox; what changed is checked
through the API and the audit log. Both databases."""

from __future__ import annotations

import re

import pytest

from paycore.http.console import scope
from paycore.reconciliation import service as reconciliation
from tests.integration.disputes.support import dispute
from tests.integration.ops.conftest import Console, act
from tests.integration.ops.dispute_support import (
    DAY_MS,
    calls,
    evidence_form,
    flash_of,
    followed,
    opened,
    page,
    row_ids,
    text_of,
)
from tests.integration.reconciliation.test_disputes_from_report import changed
from tests.integration.reconciliation.test_reconcile import report


def test_the_queue_lists_open_disputes_nearest_deadline_first_with_the_time_left(console: Console) -> None:
    seven = opened(console, 5000, 7 * DAY_MS)
    two = opened(console, 1234, 2 * DAY_MS)
    ten = opened(console, 700, 10 * DAY_MS)
    overdue = opened(console, 900, 1)  # its window already passed: paycore has not heard the loss yet
    closed = opened(console, 800, 3 * DAY_MS)
    accepted = console.env.client.post(f"/v1/disputes/{closed['id']}/accept", headers={"Idempotency-Key": "a-1"})
    assert (accepted.status_code, accepted.json()["status"]) == (200, "lost")
    vic = console.signed_in("vic")

    text = text_of(vic, "/ops/disputes")
    assert row_ids(text) == [overdue["id"], two["id"], seven["id"], ten["id"]]  # not id order, not newest first
    assert '<a href="/ops/disputes" class="here">Disputes</a>' in text  # the nav link
    row = _row(text, two["id"])
    assert "12.34 USD" in row and "fraudulent" in row and 'class="badge needs_response"' in row
    assert re.search(r'<td class="left">1d 23h left</td>', row), row
    assert f'<a href="/ops/payments/{two["payment_id"]}">' in row
    assert re.search(r'<td class="left overdue">overdue by \d+[ms]', _row(text, overdue["id"])), text
    assert "9.00 USD" in _row(text, overdue["id"])

    assert row_ids(text_of(vic, "/ops/disputes?status=closed")) == [closed["id"]]
    assert row_ids(text_of(vic, "/ops/disputes?status=lost")) == [closed["id"]]
    assert row_ids(text_of(vic, "/ops/disputes?status=won")) == []
    every = row_ids(text_of(vic, "/ops/disputes?status=all"))
    assert sorted(every) == sorted(d["id"] for d in (seven, two, ten, overdue, closed))
    refused = text_of(vic, "/ops/disputes?status=nonsense", 400)
    assert "status must be one of open, closed, all" in flash_of(refused)
    assert text_of(vic, "/ops/disputes?after=nonsense", 400)
    assert row_ids(text_of(vic, "/ops/disputes?tenant=someone-else")) == []


def test_the_queue_pages_by_deadline(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [opened(console, 1000 + index, (3 - index) * DAY_MS) for index in range(3)]
    vic = console.signed_in("vic")
    monkeypatch.setattr(scope, "PAGE_ROWS", 2)
    first = text_of(vic, "/ops/disputes")
    found = re.search(r'rel="next" href="([^"]+)"', first)
    assert found is not None and row_ids(first) == [made[2]["id"], made[1]["id"]], first
    second = text_of(vic, found.group(1).replace("&amp;", "&"))
    assert row_ids(second) == [made[0]["id"]] and 'rel="next"' not in second


def test_a_disputes_page_shows_its_facts_history_and_the_payments_timeline(console: Console) -> None:
    listed = opened(console, 5000)
    text = text_of(console.signed_in("alice"), page(listed["id"]))
    facts = re.search(r'<dl class="facts" id="facts">(.*?)</dl>', text, re.S)
    assert facts is not None
    assert "50.00 USD</strong> (fee 15.00 USD)" in facts.group(1)
    assert re.search(r'id="due">\S+ \S+Z · <strong>6d 23h left</strong>', text), facts.group(1)
    assert listed["payment_id"] in facts.group(1) and "fraudulent" in facts.group(1)
    history = re.search(r'<table class="timeline" id="history">(.*?)</table>', text, re.S)
    assert history is not None and "∅ → needs_response (webhook)" in history.group(1)
    timeline = re.search(r'<table class="timeline" id="timeline">(.*?)</table>', text, re.S)
    assert timeline is not None
    assert "processing → succeeded" in timeline.group(1) and "processor.charge" in timeline.group(1)
    assert timeline.group(1).count("transfer txn_") == 2  # the charge's, and the chargeback's withdrawal
    assert '"amount_minor": 6500' in timeline.group(1)  # withdrawn: the amount and the fee
    assert 'id="evidence-form"' in text and 'name="idempotency_key" value="ops-evidence-' in text
    assert 'maxlength="20000"' in text and 'id="accept-form"' in text
    payments_page = text_of(console.signed_in("vic"), f"/ops/payments/{listed['payment_id']}")
    assert re.search(rf'<table id="disputes">.*href="/ops/disputes/{listed["id"]}"', payments_page, re.S)
    viewer = text_of(console.signed_in("vic"), page(listed["id"]))
    assert "50.00 USD" in viewer and 'id="evidence-form"' not in viewer and 'id="accept-form"' not in viewer


def test_evidence_from_the_console_is_the_apis_answer_sent_once_per_form(console: Console) -> None:
    listed = opened(console)
    alice = console.signed_in("alice")
    first = evidence_form(alice, listed["id"], "signed delivery receipt", "ops-evidence-1")
    again = evidence_form(alice, listed["id"], "signed delivery receipt", "ops-evidence-1")  # sent twice
    assert first.headers["location"] == again.headers["location"]
    shown = followed(alice, first)
    assert "Evidence sent: the dispute is under_review." in flash_of(shown)
    assert 'class="badge under_review">under_review<' in shown and 'id="evidence-form"' not in shown
    after = dispute(console.env, listed["id"])
    steps = [(step["from"], step["to"], step["cause"], step["actor"]) for step in after["history"]]
    assert steps[-1] == ("needs_response", "under_review", "api_request", "operator:alice")
    assert calls(console, listed) == [("processor.submit_evidence", "answered", "operator:alice")]  # once
    late = evidence_form(alice, listed["id"], "more", "ops-evidence-2")
    assert late.status_code == 409 and "the dispute is under_review" in flash_of(late.text)


def test_evidence_of_20000_characters_goes_and_longer_or_empty_is_refused(console: Console) -> None:
    listed = opened(console)
    alice = console.signed_in("alice")
    longer = evidence_form(alice, listed["id"], "x" * 20_001, "ops-evidence-long")
    assert longer.status_code == 400 and "1 to 20,000 characters (20,001 were sent)" in flash_of(longer.text)
    assert ">" + "x" * 20_000 in longer.text  # the form holds what was typed
    empty = evidence_form(alice, listed["id"], "", "ops-evidence-empty")
    assert empty.status_code == 400 and "(0 were sent)" in flash_of(empty.text)
    assert calls(console, listed) == [] and dispute(console.env, listed["id"])["status"] == "needs_response"
    whole = evidence_form(alice, listed["id"], "y" * 20_000, "ops-evidence-whole")
    assert whole.status_code == 303, whole.text[:2000]
    assert dispute(console.env, listed["id"])["status"] == "under_review"
    [(_, _, _)] = calls(console, listed)


def test_a_form_without_the_csrf_token_or_from_a_viewer_changes_nothing(console: Console) -> None:
    listed = opened(console)
    alice = console.signed_in("alice")
    text_of(alice, page(listed["id"]))
    for data in ({"text": "winning_evidence", "idempotency_key": "k1"}, {"text": "x", "csrf_token": "0" * 64}):
        refused = alice.post(f"{page(listed['id'])}/evidence", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    refused = alice.post(f"{page(listed['id'])}/accept", data={"idempotency_key": "k2"})
    assert refused.status_code == 403
    vic = console.signed_in("vic")
    by_viewer = evidence_form(vic, listed["id"], "winning_evidence", "k3")
    assert by_viewer.status_code == 403 and "role operator" in by_viewer.text
    assert calls(console, listed) == [] and dispute(console.env, listed["id"])["status"] == "needs_response"


def test_an_unknown_or_another_tenants_dispute_is_404(console: Console) -> None:
    listed = opened(console)
    console.tenant("globex")
    console.operator("gina", "approver", tenant="globex")
    gina = console.signed_in("gina")
    assert "No dispute" in text_of(gina, page(listed["id"]), 404)
    assert row_ids(text_of(gina, "/ops/disputes")) == []
    sent = act(gina, f"{page(listed['id'])}/evidence", {"text": "winning_evidence", "idempotency_key": "g-1"})
    assert sent.status_code == 404
    alice = console.signed_in("alice")
    text_of(alice, page("dp_NOSUCHTHING"), 404)
    sent = act(alice, f"{page('dp_NOSUCHTHING')}/evidence", {"text": "winning_evidence", "idempotency_key": "a-1"})
    assert sent.status_code == 404
    too_long = act(alice, f"{page(listed['id'])}/evidence", {"text": "x" * 40_001, "idempotency_key": "a-2"})
    assert too_long.status_code == 400 and "longer than 40000 characters" in too_long.text
    assert calls(console, listed) == []


def test_a_lost_answer_shows_waiting_for_the_processor_until_a_status_query_settles_it(console: Console) -> None:
    listed = opened(console)
    console.env.faults({"fault": "drop_response", "next_n": 1, "ops": ["dispute_evidence"]})
    alice = console.signed_in("alice")
    shown = followed(alice, evidence_form(alice, listed["id"], "winning_evidence", "ops-evidence-lost"))
    assert "no answer from the processor: waiting for the processor" in flash_of(shown)
    assert 'id="waiting"' in shown and "processor.submit_evidence" in shown
    assert dispute(console.env, listed["id"])["status"] == "needs_response"  # nothing moved on a guess
    asked = act(alice, f"{page(listed['id'])}/refresh", page=page(listed["id"]))
    settled = followed(alice, asked)
    assert "The processor's word is applied." in flash_of(settled)
    assert 'id="waiting"' not in settled and 'class="badge under_review"' in settled
    assert dispute(console.env, listed["id"])["status"] == "under_review"


def test_an_answer_the_processor_never_got_stops_waiting_once_a_status_query_says_so(console: Console) -> None:
    listed = opened(console)
    console.env.faults({"fault": "drop_request", "next_n": 1, "ops": ["dispute_evidence"]})
    alice = console.signed_in("alice")
    shown = followed(alice, evidence_form(alice, listed["id"], "winning_evidence", "ops-evidence-dropped"))
    assert 'id="waiting"' in shown and 'id="evidence-form"' in shown  # it may be sent again
    settled = followed(alice, act(alice, f"{page(listed['id'])}/refresh", page=page(listed["id"])))
    assert "The processor says nothing new." in flash_of(settled)
    assert 'id="waiting"' not in settled and 'class="badge needs_response"' in settled
    again = followed(alice, evidence_form(alice, listed["id"], "winning_evidence", "ops-evidence-again"))
    assert "Evidence sent: the dispute is under_review." in flash_of(again)


def test_a_break_naming_a_dispute_links_to_its_page(console: Console) -> None:
    env = console.env
    listed = opened(console)
    lines = changed(report(env), "dispute_withdrawal", amount_minor="4999")
    reconciliation.reconcile(env.database, lines, grace_ms=0)
    alice = console.signed_in("alice")
    queue = text_of(alice, "/ops/reconciliation")
    found = re.search(r'<a href="/ops/reconciliation/breaks/(brk_[0-9A-Za-z]+)">', queue)
    assert found is not None, queue
    assert f'<a href="/ops/disputes/{listed["id"]}">' in queue
    broken = text_of(alice, f"/ops/reconciliation/breaks/{found.group(1)}")
    assert f'<a href="/ops/disputes/{listed["id"]}">' in broken and "paycore holds no object" not in broken
    assert listed["id"] in text_of(alice, page(listed["id"]))


def _row(text: str, dispute_id: str) -> str:
    found = re.search(rf'<tr>\s*<td><a href="/ops/disputes/{dispute_id}">.*?</tr>', text, re.S)
    assert found is not None, text
    return found.group(0)
