"""How paycore's HTTP transport reads a processor's charge: an answer without an
authorization's fields is an automatic charge (as every answer was before authorizations);
an authorization's status or amounts that do not read exactly are no answer."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.processor.http_transport import _charge_result
from paycore.processor.port import ChargeResult, ProcessorUnreachable

AUTOMATIC: dict[str, Any] = {
    "request_id": "pay_1",
    "status": "succeeded",
    "processor_charge_id": "ch_1",
    "amount_minor": 5_000,
    "currency": "EUR",
    "failure_code": None,
}
MANUAL: dict[str, Any] = {
    **AUTOMATIC,
    "status": "captured",
    "capture": "manual",
    "amount_capturable_minor": 0,
    "amount_captured_minor": 3_000,
    "amount_released_minor": 2_000,
    "authorization_expires_at_us": 1_800_000_000_000_000,
}


def test_an_answer_without_authorization_fields_is_an_automatic_charge() -> None:
    assert _charge_result(AUTOMATIC) == ChargeResult("pay_1", "succeeded", "ch_1", 5_000, "EUR")


def test_an_authorization_is_read_with_its_amounts_and_expiry() -> None:
    result = _charge_result(MANUAL)

    assert (result.status, result.capture, result.amount_captured_minor) == ("captured", "manual", 3_000)
    assert result.authorization_expires_at_us == 1_800_000_000_000_000


@pytest.mark.parametrize(
    "answer",
    [
        {**AUTOMATIC, "status": "requires_capture"},  # an authorization's status on an automatic charge
        {**MANUAL, "capture": "later"},
        {**MANUAL, "amount_captured_minor": 3_000.0},
        {**MANUAL, "amount_released_minor": True},
        {**MANUAL, "authorization_expires_at_us": "2027-01-15T08:00:00Z"},
        {**MANUAL, "status": "authorized"},
    ],
)
def test_an_answer_that_does_not_read_exactly_is_no_answer(answer: dict[str, Any]) -> None:
    with pytest.raises(ProcessorUnreachable):
        _charge_result(answer)
