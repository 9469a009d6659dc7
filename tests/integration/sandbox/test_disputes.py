"""Disputes (SPEC §6.2, docs/sandbox.md "Disputes"), through both transports on SQLite and in
process on PostgreSQL: tok_disputed is disputed about a second after it succeeds, the admin
call opens one on any captured charge, evidence is decided as documented, acceptance and a
passed deadline lose, inquiries close or become chargebacks; refusals store nothing."""

from __future__ import annotations

import time

import pytest

from paycore.kit import clock
from paycore.processor.port import CaptureRequest
from paycore_sandbox.disputes import (
    LOSING_EVIDENCE,
    WINNING_EVIDENCE,
    EvidenceRequest,
    OpenDisputeRequest,
    decision,
)
from paycore_sandbox.limits import EVIDENCE_TEXT_LENGTH_MAX
from tests.integration.sandbox.conftest import SETTINGS, Harness
from tests.integration.sandbox.dispute_support import (
    AMOUNT_MINOR,
    CURRENCY,
    MERCHANT,
    SECOND_US,
    accept,
    after,
    charge,
    disputes_of,
    event_types,
    evidence,
    open_one,
    refused,
)

WINDOW_S = SETTINGS.dispute_evidence_window_ms / 1000


@pytest.fixture
def harness(harness_on_backends: Harness) -> Harness:
    return harness_on_backends


def test_tok_disputed_is_disputed_about_a_second_after_it_succeeds(harness: Harness) -> None:
    before_us = clock.now_us()
    charged = charge(harness, token="tok_disputed")
    charged_by_us = clock.now_us()
    disputes = disputes_of(harness)

    assert charged.status == "succeeded"
    open_after_us = SETTINGS.dispute_open_after_ms * 1_000
    assert harness.sandbox.settle_due(before_us + open_after_us - 1) == 0
    assert disputes.disputes_of_charge("pay_1") == []
    assert harness.sandbox.settle_due(charged_by_us + open_after_us) == 1

    [opened] = disputes.disputes_of_charge("pay_1")
    assert (opened.type, opened.status, opened.reason) == ("chargeback", "needs_response", "fraudulent")
    assert (opened.amount_minor, opened.currency, opened.fee_minor) == (AMOUNT_MINOR, CURRENCY, 1_500)
    assert (opened.payment_reference, opened.merchant_id) == (charged.processor_charge_id, MERCHANT)
    window_us = SETTINGS.dispute_evidence_window_ms * 1_000
    assert clock.parse_rfc3339(opened.evidence_due_by) - clock.parse_rfc3339(opened.created_at) == window_us
    assert disputes.get_dispute(opened.dispute_id) == opened
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created"]
    assert harness.sandbox.settle_due(after(5)) == 0, "a charge is disputed once"


def test_a_tok_disputed_authorization_is_disputed_for_what_was_captured_once_captured(harness: Harness) -> None:
    authorized = charge(harness, token="tok_disputed", capture="manual")
    assert harness.sandbox.settle_due(after(5)) == 0, "an open authorization took nothing to dispute"

    capture = CaptureRequest("cap_1", MERCHANT, authorized.processor_charge_id, 2_000, CURRENCY)
    harness.processor.capture(capture)
    harness.sandbox.settle_due(after(5))

    [opened] = disputes_of(harness).disputes_of_charge("pay_1")
    assert (opened.amount_minor, opened.status) == (2_000, "needs_response")


def test_the_admin_call_opens_an_inquiry_or_a_chargeback_of_part_of_a_charge(harness: Harness) -> None:
    inquiry = open_one(harness, "pay_1", amount_minor=1_200, reason="product_not_received", type="inquiry")
    chargeback = open_one(harness, "pay_2", reason="duplicate")

    assert (inquiry.type, inquiry.status, inquiry.amount_minor, inquiry.fee_minor) == (
        "inquiry",
        "warning_needs_response",
        1_200,
        0,
    )
    assert inquiry.reason == "product_not_received"
    assert (chargeback.type, chargeback.status, chargeback.amount_minor) == ("chargeback", "needs_response", 5_000)
    assert chargeback.fee_minor == SETTINGS.dispute_fee_minor and chargeback.reason == "duplicate"
    assert disputes_of(harness).get_dispute(inquiry.dispute_id) == inquiry


def test_the_admin_call_refuses_what_cannot_be_disputed_and_stores_nothing(harness: Harness) -> None:
    disputes = disputes_of(harness)
    declined = charge(harness, "pay_declined", "tok_declined")
    authorized = charge(harness, "pay_auth", capture="manual")
    charged = charge(harness, "pay_ok")

    def open_on(reference: str, **kwargs: object) -> object:
        return lambda: disputes.open_dispute(OpenDisputeRequest(reference, **kwargs))  # type: ignore[arg-type]

    refused(open_on("ch_unknown"), "charge_not_found")
    refused(open_on(declined.processor_charge_id), "charge_not_disputable")
    refused(open_on(authorized.processor_charge_id), "charge_not_disputable")
    refused(open_on(charged.processor_charge_id, amount_minor=AMOUNT_MINOR + 1), "amount_too_large")
    refused(open_on(charged.processor_charge_id, type="retrieval"), "invalid_request")
    refused(open_on(charged.processor_charge_id, reason="bored"), "invalid_request")
    refused(open_on(charged.processor_charge_id, amount_minor=0), "invalid_amount")
    refused(open_on(charged.processor_charge_id, evidence_window_ms=0), "invalid_request")
    refused(open_on(charged.processor_charge_id, evidence_window_ms=91 * 86_400_000), "invalid_request")
    assert disputes.disputes_of_charge("pay_ok") == []

    disputes.open_dispute(OpenDisputeRequest(charged.processor_charge_id))
    refused(open_on(charged.processor_charge_id), "charge_already_disputed")
    assert len(disputes.disputes_of_charge("pay_ok")) == 1


@pytest.mark.parametrize(("text", "outcome"), [(WINNING_EVIDENCE, "won"), (LOSING_EVIDENCE, "lost")])
def test_evidence_puts_a_chargeback_under_review_and_is_decided_a_second_later(
    harness: Harness, text: str, outcome: str
) -> None:
    disputes = disputes_of(harness)
    opened = open_one(harness)

    reviewed = disputes.submit_evidence(evidence(opened, f"receipt and tracking: {text}"))

    assert (reviewed.status, reviewed.evidence_submitted) == ("under_review", True)
    assert harness.sandbox.settle_due(after(0.5)) == 0
    assert harness.sandbox.settle_due(after(SETTINGS.dispute_decision_after_ms / 1000 + 0.5)) == 1
    decided = disputes.get_dispute(opened.dispute_id)
    assert decided is not None and decided.status == outcome and decided.closed_at is not None
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created", "dispute.updated", "dispute.closed"]


def test_other_evidence_is_decided_by_the_seeded_digest_the_same_every_time(harness: Harness) -> None:
    texts = [f"invoice number {number}" for number in range(8)]
    expected = [decision(text, SETTINGS.dispute_decision_seed) for text in texts]
    assert set(expected) == {"won", "lost"}, "some texts win and some lose"
    assert [decision(text, SETTINGS.dispute_decision_seed) for text in texts] == expected
    disputes = disputes_of(harness)

    for number, text in enumerate(texts[:3]):
        opened = open_one(harness, f"pay_{number}")
        disputes.submit_evidence(evidence(opened, text, f"ev_{number}"))
        harness.sandbox.settle_due(after(5))
        assert disputes.get_dispute(opened.dispute_id).status == expected[number]  # type: ignore[union-attr]


def test_an_evidence_request_id_is_one_submission(harness: Harness) -> None:
    disputes = disputes_of(harness)
    opened = open_one(harness)
    first = disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE))

    assert disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE)) == first
    refused(lambda: disputes.submit_evidence(evidence(opened, LOSING_EVIDENCE)), "request_id_reused")
    refusal = refused(lambda: disputes.submit_evidence(evidence(opened, "more", "ev_2")), "dispute_not_open")
    assert "under_review" in str(refusal)
    refused(lambda: disputes.accept_dispute(accept(opened)), "dispute_not_open")
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created", "dispute.updated"]


def test_evidence_text_is_bounded_and_another_merchants_dispute_is_not_found(harness: Harness) -> None:
    disputes = disputes_of(harness)
    opened = open_one(harness)

    refused(lambda: disputes.submit_evidence(evidence(opened, "x" * (EVIDENCE_TEXT_LENGTH_MAX + 1))), "invalid_request")
    refused(lambda: disputes.submit_evidence(evidence(opened, "")), "invalid_request")
    other = EvidenceRequest("ev_9", "merchant_2", opened.dispute_id, WINNING_EVIDENCE)
    refused(lambda: disputes.submit_evidence(other), "dispute_not_found")
    assert disputes.get_dispute("dp_sbx_unknown") is None
    assert disputes.submit_evidence(evidence(opened, "x" * EVIDENCE_TEXT_LENGTH_MAX)).status == "under_review"


def test_accepting_a_chargeback_loses_it_now(harness: Harness) -> None:
    disputes = disputes_of(harness)
    opened = open_one(harness)

    lost = disputes.accept_dispute(accept(opened))

    assert (lost.status, lost.closed_at is not None) == ("lost", True)
    assert disputes.accept_dispute(accept(opened)) == lost, "the same request id replays"
    refused(lambda: disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE)), "dispute_not_open")
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created", "dispute.closed"]


def test_a_chargeback_not_answered_within_its_window_is_lost(harness: Harness) -> None:
    opened = open_one(harness)
    assert harness.sandbox.settle_due(after(WINDOW_S - 60)) == 0

    assert harness.sandbox.settle_due(after(WINDOW_S + 1)) == 1

    assert disputes_of(harness).get_dispute(opened.dispute_id).status == "lost"  # type: ignore[union-attr]
    assert event_types(harness.sandbox, opened.dispute_id) == ["dispute.created", "dispute.closed"]


def test_the_admin_call_can_give_one_dispute_a_short_window_and_the_default_stays(harness: Harness) -> None:
    """`evidence_window_ms` on the admin call: that dispute is lost by silence after it; a
    dispute opened without it keeps the sandbox's window."""
    short = open_one(harness, "pay_short", evidence_window_ms=2_000)
    usual = open_one(harness, "pay_usual")
    opened_us = clock.parse_rfc3339(short.created_at)
    assert clock.parse_rfc3339(short.evidence_due_by) == opened_us + 2_000 * 1_000
    assert clock.parse_rfc3339(usual.evidence_due_by) - clock.parse_rfc3339(usual.created_at) == WINDOW_S * SECOND_US

    assert harness.sandbox.settle_due(opened_us + 3 * SECOND_US) == 1

    assert disputes_of(harness).get_dispute(short.dispute_id).status == "lost"  # type: ignore[union-attr]
    assert disputes_of(harness).get_dispute(usual.dispute_id).status == "needs_response"  # type: ignore[union-attr]
    assert event_types(harness.sandbox, short.dispute_id) == ["dispute.created", "dispute.closed"]


def test_an_inquiry_closes_on_winning_evidence_or_acceptance(harness: Harness) -> None:
    disputes = disputes_of(harness)
    won = open_one(harness, "pay_1", type="inquiry")
    accepted = open_one(harness, "pay_2", type="inquiry")

    answered = disputes.submit_evidence(evidence(won, WINNING_EVIDENCE))
    assert (answered.status, answered.evidence_submitted) == ("warning_needs_response", True)
    refused(lambda: disputes.submit_evidence(evidence(won, "again", "ev_2")), "dispute_not_open")
    assert disputes.accept_dispute(accept(accepted)).status == "warning_closed"
    harness.sandbox.settle_due(after(5))

    closed = disputes.get_dispute(won.dispute_id)
    assert closed is not None and (closed.status, closed.type, closed.fee_minor) == ("warning_closed", "inquiry", 0)
    assert event_types(harness.sandbox, won.dispute_id) == ["dispute.created", "dispute.updated", "dispute.closed"]


@pytest.mark.parametrize("answer", ["losing evidence", "silence"])
def test_an_inquiry_lost_or_unanswered_becomes_a_chargeback(harness: Harness, answer: str) -> None:
    disputes = disputes_of(harness)
    inquiry = open_one(harness, type="inquiry")
    if answer == "silence":
        harness.sandbox.settle_due(after(WINDOW_S + 1))
    else:
        disputes.submit_evidence(evidence(inquiry, LOSING_EVIDENCE))
        harness.sandbox.settle_due(after(5))

    chargeback = disputes.get_dispute(inquiry.dispute_id)
    assert chargeback is not None
    assert (chargeback.type, chargeback.status) == ("chargeback", "needs_response")
    assert not chargeback.evidence_submitted
    assert chargeback.fee_minor == SETTINGS.dispute_fee_minor
    assert clock.parse_rfc3339(chargeback.evidence_due_by) > clock.parse_rfc3339(inquiry.evidence_due_by)
    assert disputes.submit_evidence(evidence(chargeback, WINNING_EVIDENCE, "ev_cb")).status == "under_review"


def test_a_read_takes_a_decision_that_is_due(harness: Harness) -> None:
    disputes = disputes_of(harness)
    opened = open_one(harness)
    disputes.submit_evidence(evidence(opened, WINNING_EVIDENCE))
    decided_by_us = clock.now_us() + SETTINGS.dispute_decision_after_ms * 1_000

    time.sleep(max(0, decided_by_us - clock.now_us()) / SECOND_US + 0.05)  # the background is not running
    decided = disputes.get_dispute(opened.dispute_id)

    assert decided is not None and decided.status == "won"
