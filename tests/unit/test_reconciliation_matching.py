"""The break rules of reconciliation (paycore.reconciliation.matching), without a database:
each line type against each status paycore can hold."""

from __future__ import annotations

import dataclasses

import pytest

from paycore.kit import clock
from paycore.reconciliation.matching import Finding, Known, Verdict, judge
from paycore.reconciliation.report import Line

AT_US = clock.parse_rfc3339("2024-11-25T16:00:00Z")


def line(kind: str = "charge", status: str = "succeeded", amount_minor: int = 2500, **changes: object) -> Line:
    values: dict[str, object] = {
        "number": 2,
        "type": kind,
        "request_id": "pay_1",
        "processor_id": "ch_1",
        "merchant_id": "acme",
        "amount_minor": amount_minor,
        "fee_minor": 0,
        "currency": "USD",
        "status": status,
        "created_at_us": AT_US,
        "batch_id": None,
        "code": None,
        "fields": (),
    }
    return Line(**{**values, **changes})  # type: ignore[arg-type]


def known(kind: str = "payment", status: str = "succeeded", amount_minor: int = 2500, **changes: object) -> Known:
    return dataclasses.replace(Known(kind, "pay_1", status, amount_minor, "USD"), **changes)  # type: ignore[arg-type]


def types(verdict: Verdict) -> list[str]:
    return [finding.type for finding in verdict.findings]


def test_a_line_that_agrees_is_matched_and_proves_nothing_new() -> None:
    assert judge(line(), known()) == Verdict()
    assert judge(line(), known()).matched


@pytest.mark.parametrize(("kind", "status"), [("charge", "succeeded"), ("refund", "succeeded"), ("payout", "settled")])
def test_money_paycore_has_no_record_of_is_missing_in_paycore(kind: str, status: str) -> None:
    verdict = judge(line(kind, status), None)
    assert types(verdict) == ["missing_in_paycore"] and verdict.proves is None


def test_a_return_paycore_has_no_payout_for_is_missing_in_paycore() -> None:
    assert types(judge(line("payout_return", "returned"), None)) == ["missing_in_paycore"]


@pytest.mark.parametrize("status", ["failed", "pending"])
def test_a_charge_that_moved_no_money_and_that_paycore_never_sent_is_not_a_break(status: str) -> None:
    assert judge(line("charge", status), None) == Verdict()


@pytest.mark.parametrize(
    ("kind", "waiting", "status", "proves"),
    [
        ("payment", "in_doubt", "succeeded", "succeeded"),
        ("payment", "processing", "failed", "failed"),
        ("refund", "in_doubt", "succeeded", "succeeded"),
        ("refund", "processing", "failed", "failed"),
    ],
)
def test_a_final_status_for_a_waiting_object_is_proved(kind: str, waiting: str, status: str, proves: str) -> None:
    line_type = "charge" if kind == "payment" else "refund"
    verdict = judge(line(line_type, status), known(kind, waiting))
    assert verdict == Verdict(proves=proves)


@pytest.mark.parametrize("waiting", ["processing", "in_doubt", "sent"])
def test_a_settlement_proves_a_waiting_payout_settled(waiting: str) -> None:
    assert judge(line("payout", "settled"), known("payout", waiting)) == Verdict(proves="settled")


def test_pending_at_the_processor_proves_nothing_and_is_no_break_while_paycore_waits_too() -> None:
    assert judge(line("charge", "pending"), known("payment", "in_doubt")) == Verdict()


@pytest.mark.parametrize(
    ("paycore", "report"),
    [("failed", "succeeded"), ("succeeded", "failed"), ("succeeded", "pending"), ("failed", "pending")],
)
def test_a_report_never_overrides_a_final_status_it_contradicts(paycore: str, report: str) -> None:
    verdict = judge(line("charge", report), known("payment", paycore))
    assert types(verdict) == ["status_mismatch"] and verdict.proves is None
    assert f"paycore payment {paycore}" in verdict.findings[0].detail


@pytest.mark.parametrize("never_sent", ["requires_approval", "pending", "canceled"])
def test_a_refund_the_processor_made_that_paycore_never_sent_is_a_status_mismatch(never_sent: str) -> None:
    assert types(judge(line("refund", "succeeded"), known("refund", never_sent))) == ["status_mismatch"]


@pytest.mark.parametrize("status", ["scheduled", "queued", "failed", "canceled"])
def test_a_settlement_of_a_payout_paycore_did_not_send_is_a_status_mismatch(status: str) -> None:
    assert types(judge(line("payout", "settled"), known("payout", status))) == ["status_mismatch"]


def test_a_settlement_read_again_after_the_return_agrees() -> None:
    assert judge(line("payout", "settled"), known("payout", "returned")) == Verdict()


def test_a_return_proves_a_settled_payout_returned_and_only_that_one() -> None:
    returned = line("payout_return", "returned", amount_minor=2400, code="R02")
    assert judge(returned, known("payout", "settled")) == Verdict(proves="returned")
    assert judge(returned, known("payout", "returned")) == Verdict()
    for status in ("sent", "in_doubt", "failed"):
        assert types(judge(returned, known("payout", status))) == ["status_mismatch"], status


def test_a_return_may_bring_back_less_than_was_paid_out_never_more() -> None:
    assert judge(line("payout_return", "returned", amount_minor=2500), known("payout", "settled")).proves == "returned"
    verdict = judge(line("payout_return", "returned", amount_minor=2501), known("payout", "settled"))
    assert types(verdict) == ["amount_mismatch"] and verdict.proves is None


def test_another_amount_or_currency_is_a_break_and_proves_nothing() -> None:
    verdict = judge(line("charge", "succeeded", amount_minor=2499), known("payment", "in_doubt"))
    assert verdict == Verdict((Finding("amount_mismatch", "report 2499, paycore 2500"),))
    verdict = judge(line("charge", "succeeded", currency="EUR"), known("payment", "in_doubt"))
    assert verdict == Verdict((Finding("currency_mismatch", "report EUR, paycore USD"),))


def test_a_fee_is_booked_once_and_a_different_booked_fee_is_a_break() -> None:
    assert judge(line(fee_minor=103), known()) == Verdict(fee_to_book_minor=103)
    assert judge(line(fee_minor=103), known(fee_minor=103)) == Verdict()
    verdict = judge(line(fee_minor=103), known(fee_minor=100))
    assert verdict == Verdict((Finding("fee_mismatch", "report 103, booked 100"),))


def test_a_line_is_judged_against_an_object_of_its_own_kind_only() -> None:
    with pytest.raises(AssertionError):
        judge(line("refund"), known("payment"))


_DISPUTE_LINES = [
    ("dispute_withdrawal", "withdrawn"),
    ("dispute_fee", "charged"),
    ("dispute_reinstatement", "reinstated"),
]


def dispute_line(kind: str, status: str, amount_minor: int = 2500, **changes: object) -> Line:
    return line(kind, status, amount_minor, processor_id="dp_sbx_1", **changes)


def dispute(amount_minor: int = 2500, *, moved: bool = True) -> Known:
    return Known("dispute", "dp_1", "needs_response", amount_minor, "USD", 0, moved=moved)


@pytest.mark.parametrize(("kind", "status"), _DISPUTE_LINES)
def test_a_dispute_line_that_agrees_is_matched_and_proves_nothing(kind: str, status: str) -> None:
    assert judge(dispute_line(kind, status), dispute()) == Verdict()


@pytest.mark.parametrize(("kind", "status"), _DISPUTE_LINES)
def test_a_dispute_paycore_does_not_know_is_missing_in_paycore_by_its_processor_id(kind: str, status: str) -> None:
    verdict = judge(dispute_line(kind, status), None)
    assert verdict.findings == (Finding("missing_in_paycore", "no dispute dp_sbx_1"),) and verdict.proves is None


@pytest.mark.parametrize(("kind", "status"), _DISPUTE_LINES)
def test_a_dispute_line_of_another_amount_or_currency_is_a_mismatch(kind: str, status: str) -> None:
    assert types(judge(dispute_line(kind, status, 2400), dispute())) == ["amount_mismatch"]
    assert types(judge(dispute_line(kind, status, currency="EUR"), dispute())) == ["currency_mismatch"]
    assert types(judge(dispute_line(kind, status, fee_minor=5), dispute())) == ["fee_mismatch"]


@pytest.mark.parametrize(("kind", "status"), _DISPUTE_LINES)
def test_a_dispute_line_for_money_paycore_did_not_move_is_a_status_mismatch(kind: str, status: str) -> None:
    verdict = judge(dispute_line(kind, status), dispute(moved=False))
    assert types(verdict) == ["status_mismatch"] and verdict.proves is None
