"""Every test token's outcome, through both transports."""

from __future__ import annotations

import pytest

from paycore.processor.port import ChargeRequest, ProcessorRefused, ProcessorUnreachable
from tests.integration.sandbox.conftest import Harness, count


def charge_request(request_id: str, token: str, amount_minor: int = 1_000) -> ChargeRequest:
    return ChargeRequest(request_id, "merchant_1", amount_minor, "USD", token, description="order 42")


@pytest.mark.parametrize(
    ("token", "status", "failure_code"),
    [
        ("tok_ok", "succeeded", None),
        ("tok_declined", "failed", "card_declined"),
        ("tok_insufficient_funds", "failed", "insufficient_funds"),
        ("tok_refund_declined", "succeeded", None),
    ],
)
def test_immediate_outcomes(harness: Harness, token: str, status: str, failure_code: str | None) -> None:
    result = harness.processor.charge(charge_request("ch_req_1", token))

    assert (result.status, result.failure_code) == (status, failure_code)
    assert result.request_id == "ch_req_1"
    assert result.processor_charge_id.startswith("ch_")
    assert (result.amount_minor, result.currency) == (1_000, "USD")
    assert harness.processor.get_charge("ch_req_1") == result


def test_tok_pending_answers_pending_then_succeeds(harness: Harness) -> None:
    result = harness.processor.charge(charge_request("ch_req_1", "tok_pending"))
    assert (result.status, result.failure_code) == ("pending", None)
    assert harness.sandbox.settle_due() == 0, "not before settle_late_ms"

    assert harness.sandbox.settle_due(harness.later_us()) == 1

    settled = harness.processor.get_charge("ch_req_1")
    assert settled is not None and settled.status == "succeeded"
    assert settled.processor_charge_id == result.processor_charge_id
    assert harness.processor.charge(charge_request("ch_req_1", "tok_pending")) == settled


def test_tok_timeout_takes_the_charge_and_loses_every_answer(harness: Harness) -> None:
    for _ in range(2):  # the retry with the same request id is lost too, and charges nothing more
        with pytest.raises(ProcessorUnreachable):
            harness.processor.charge(charge_request("ch_req_1", "tok_timeout"))

    found = harness.processor.get_charge("ch_req_1")
    assert found is not None and found.status == "succeeded"
    assert count(harness.sandbox, "charges") == 1


def test_unknown_token_is_refused_and_nothing_is_stored(harness: Harness) -> None:
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.charge(charge_request("ch_req_1", "tok_unknown"))

    assert refused.value.code == "invalid_token"
    assert harness.processor.get_charge("ch_req_1") is None
    assert count(harness.sandbox, "charges") == 0
    assert count(harness.sandbox, "webhooks") == 0


@pytest.mark.parametrize(
    ("request_value", "code"),
    [
        (ChargeRequest("r", "merchant_1", 0, "USD", "tok_ok"), "invalid_amount"),
        (ChargeRequest("r", "merchant_1", 2**53, "USD", "tok_ok"), "invalid_amount"),
        (ChargeRequest("r", "merchant_1", 100, "XXX", "tok_ok"), "invalid_currency"),
        (ChargeRequest("", "merchant_1", 100, "USD", "tok_ok"), "invalid_request"),
        (ChargeRequest("r", "m" * 65, 100, "USD", "tok_ok"), "invalid_request"),
    ],
)
def test_invalid_charges_are_refused(harness: Harness, request_value: ChargeRequest, code: str) -> None:
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.charge(request_value)

    assert refused.value.code == code
    assert count(harness.sandbox, "charges") == 0


def test_unknown_request_ids_are_none(harness: Harness) -> None:
    assert harness.processor.get_charge("never sent/..?") is None
    assert harness.processor.get_refund("never sent") is None


@pytest.mark.parametrize("request_id", ["pay/1", "pay?x=1#y", "pay 1 ../..", "pay_é_1", "%2F"])
def test_any_request_id_is_found_again(harness: Harness, request_id: str) -> None:
    result = harness.processor.charge(charge_request(request_id, "tok_ok"))

    assert harness.processor.get_charge(request_id) == result
    assert result.request_id == request_id
