"""Accepting a dispute in the console (issue 41 point 4): at or below the tenant's approval
threshold one operator accepts; above it the accept is asked for and an approver other than
who asked sends it (`operators.four_eyes`, as for refunds), never the asker, never offered to
the asker; every step in the audit log with the person as actor. Both databases."""

from __future__ import annotations

import re

from tests.integration.disputes.support import dispute
from tests.integration.ops.conftest import Console, act
from tests.integration.ops.dispute_support import (
    accept_form,
    approve_form,
    calls,
    flash_of,
    followed,
    opened,
    page,
    records,
    text_of,
)


def threshold(console: Console, amount_minor: int | None) -> None:
    """The tenant's approval threshold (its key may set one: it tightens four eyes)."""
    response = console.env.client.put("/v1/settings", json={"refund_approval_threshold_minor": amount_minor})
    assert response.status_code == 200, response.text


def steps(console: Console, dispute_id: str) -> list[tuple[str | None, str, str, str]]:
    history = dispute(console.env, dispute_id)["history"]
    return [(step["from"], step["to"], step["cause"], step["actor"]) for step in history]


def notes(console: Console, listed: dict[str, object]) -> list[tuple[str, str, dict[str, object]]]:
    return [(e.type, e.actor, e.data) for e in records(console, listed) if e.kind == "note"]


def test_at_the_threshold_one_operator_accepts_once_per_form(console: Console) -> None:
    threshold(console, 5000)
    listed = opened(console, 5000)  # exactly the threshold: no second person, as for a refund
    alice = console.signed_in("alice")
    assert 'id="accept-form"' in text_of(alice, page(listed["id"]))
    first = accept_form(alice, listed["id"], "ops-accept-1")
    again = accept_form(alice, listed["id"], "ops-accept-1")  # a double click
    shown = followed(alice, first)
    assert again.headers["location"] == first.headers["location"]
    assert "Accepted: the dispute is lost." in flash_of(shown) and 'class="badge lost"' in shown
    assert steps(console, listed["id"])[-1] == ("needs_response", "lost", "api_request", "operator:alice")
    assert calls(console, listed) == [("processor.accept_dispute", "answered", "operator:alice")]
    assert notes(console, listed) == []  # nothing asked for: nothing approved


def test_above_the_threshold_a_second_person_approves_and_never_the_asker(console: Console) -> None:
    threshold(console, 4999)
    listed = opened(console, 5000)
    bob = console.signed_in("bob")  # an approver asks: still not their own approver
    text = text_of(bob, page(listed["id"]))
    assert "Ask to accept" in text and "approval threshold of 49.99 USD" in text
    asked = followed(bob, accept_form(bob, listed["id"], "ops-accept-bob"))
    assert "Accept asked for: 50.00 USD is above the approval threshold of 49.99 USD" in flash_of(asked)
    assert dispute(console.env, listed["id"])["status"] == "needs_response"  # nothing sent
    assert calls(console, listed) == []
    assert 'id="approval"' in asked and "asked for by operator:bob" in asked
    assert "/accept/approve" not in asked  # never offered to the asker
    assert 'id="accept-form"' not in asked  # one request at a time
    assert "/accept/approve" not in text_of(bob, "/ops/approvals")

    own = approve_form(bob, listed["id"])
    assert own.status_code == 403 and "cannot also approve" in own.text
    alice = console.signed_in("alice")  # an operator: may ask, may not approve
    assert "/accept/approve" not in text_of(alice, page(listed["id"]))
    by_operator = approve_form(alice, listed["id"])
    assert by_operator.status_code == 403 and "role approver" in by_operator.text
    assert dispute(console.env, listed["id"])["status"] == "needs_response" and calls(console, listed) == []

    carol = console.signed_in("carol")
    waiting = text_of(carol, "/ops/approvals")
    row = re.search(rf'<tr>\s*<td><a href="/ops/disputes/{listed["id"]}">.*?</tr>', waiting, re.S)
    assert row is not None and "operator:bob" in row.group(0) and "/accept/approve" in row.group(0)
    done = followed(carol, approve_form(carol, listed["id"]))
    assert "Approved operator:bob's accept: the dispute is lost." in flash_of(done)
    assert steps(console, listed["id"])[-1] == ("needs_response", "lost", "api_request", "operator:carol")
    assert calls(console, listed) == [("processor.accept_dispute", "answered", "operator:carol")]
    [requested, approved] = notes(console, listed)
    assert requested[:2] == ("dispute.accept_requested", "operator:bob")
    assert requested[2]["idempotency_key"] == "ops-accept-bob" and requested[2]["threshold_minor"] == 4999
    assert approved[:2] == ("dispute.accept_approved", "operator:carol")
    assert approved[2]["requested_by"] == "operator:bob" and approved[2]["answer_status"] == 200
    assert listed["id"] not in text_of(carol, "/ops/approvals") and 'id="approval"' not in done

    again = approve_form(carol, listed["id"])  # nothing waits any more
    assert again.status_code == 409 and "no accept of this dispute waits" in flash_of(again.text)
    assert len(calls(console, listed)) == 1


def test_an_asked_accept_is_asked_once_canceled_by_its_asker_and_asked_again(console: Console) -> None:
    threshold(console, 100)
    listed = opened(console, 5000)
    alice = console.signed_in("alice")
    first = accept_form(alice, listed["id"], "ops-accept-a")
    again = accept_form(alice, listed["id"], "ops-accept-a")  # the same form twice: one request
    assert (first.status_code, again.status_code) == (303, 303)
    other = accept_form(alice, listed["id"], "ops-accept-b")
    assert other.status_code == 409 and "already asked to accept it" in flash_of(other.text)
    assert [note[0] for note in notes(console, listed)] == ["dispute.accept_requested"]

    canceled = followed(alice, act(alice, f"{page(listed['id'])}/accept/cancel", page=page(listed["id"])))
    assert "operator:alice's accept canceled" in flash_of(canceled) and 'id="accept-form"' in canceled
    carol = console.signed_in("carol")
    nothing = approve_form(carol, listed["id"])
    assert nothing.status_code == 409 and calls(console, listed) == []

    followed(alice, accept_form(alice, listed["id"], "ops-accept-c"))
    done = followed(carol, approve_form(carol, listed["id"]))
    assert "the dispute is lost" in flash_of(done)
    types = [(note[0], note[1]) for note in notes(console, listed)]
    assert types == [
        ("dispute.accept_requested", "operator:alice"),
        ("dispute.accept_canceled", "operator:alice"),
        ("dispute.accept_requested", "operator:alice"),
        ("dispute.accept_approved", "operator:carol"),
    ]


def test_an_approved_accept_whose_answer_is_lost_waits_and_is_approved_again_once(console: Console) -> None:
    threshold(console, 100)
    listed = opened(console, 5000)
    alice, carol = console.signed_in("alice"), console.signed_in("carol")
    followed(alice, accept_form(alice, listed["id"], "ops-accept-lost"))
    console.env.faults({"fault": "drop_response", "next_n": 1, "ops": ["dispute_accept"]})
    lost = followed(carol, approve_form(carol, listed["id"]))
    assert "no answer from the processor: waiting for the processor" in flash_of(lost)
    assert 'id="waiting"' in lost and 'id="approval"' in lost  # still asked: approving again resends it
    assert dispute(console.env, listed["id"])["status"] == "needs_response"
    done = followed(carol, approve_form(carol, listed["id"]))
    assert "the dispute is lost" in flash_of(done)
    sent = calls(console, listed)
    assert [call[0] for call in sent] == ["processor.accept_dispute"] * 2 and sent[-1][1] == "answered"
    assert dispute(console.env, listed["id"])["status"] == "lost"
    requests = {call_request for call_request in _request_ids(console, listed)}
    assert len(requests) == 1  # the same request both times: the processor accepted once


def _request_ids(console: Console, listed: dict[str, object]) -> list[str]:
    found = [e for e in records(console, listed) if e.kind == "processor_call"]
    return [str(e.data["request"]["request_id"]) for e in found]
