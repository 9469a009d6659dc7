"""Refunds: against a succeeded charge of the same merchant and currency, never past the
charge's amount (succeeded and pending refunds count), atomically in the database."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from paycore.processor.port import ChargeRequest, ChargeResult, ProcessorRefused, RefundRequest, RefundResult
from paycore_sandbox import Sandbox
from tests.integration.sandbox.conftest import Harness, count


def charge(harness: Harness, token: str = "tok_ok", amount_minor: int = 1_000) -> ChargeResult:
    return harness.processor.charge(ChargeRequest("pay_1", "merchant_1", amount_minor, "USD", token))


def refund(request_id: str, reference: str, amount_minor: int, **overrides: str) -> RefundRequest:
    values = {"merchant_id": "merchant_1", "currency": "USD", **overrides}
    return RefundRequest(request_id, values["merchant_id"], reference, amount_minor, values["currency"])


def test_partial_refunds_up_to_the_amount_then_over_refund(harness: Harness) -> None:
    charged = charge(harness)

    first = harness.processor.refund(refund("rf_1", charged.processor_charge_id, 600))
    second = harness.processor.refund(refund("rf_2", charged.processor_charge_id, 400))
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(refund("rf_3", charged.processor_charge_id, 1))

    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert first.processor_refund_id.startswith("re_") and first.processor_refund_id != second.processor_refund_id
    assert refused.value.code == "over_refund"
    assert harness.processor.get_refund("rf_3") is None
    assert count(harness.sandbox, "refunds") == 2


def test_a_refund_above_the_charge_is_refused(harness: Harness) -> None:
    charged = charge(harness)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(refund("rf_1", charged.processor_charge_id, 1_001))

    assert refused.value.code == "over_refund"
    assert count(harness.sandbox, "refunds") == 0


def test_pending_refunds_count_toward_the_amount(harness: Harness) -> None:
    charged = charge(harness)
    harness.sandbox.set_fault_plan({"rules": [{"fault": "settle_late", "next_n": 1, "ops": ["refund"]}]})

    pending = harness.processor.refund(refund("rf_1", charged.processor_charge_id, 700))
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(refund("rf_2", charged.processor_charge_id, 301))

    assert pending.status == "pending"
    assert refused.value.code == "over_refund"


@pytest.mark.parametrize(
    ("reference", "overrides", "code"),
    [
        ("ch_unknown", {}, "charge_not_found"),
        (None, {"merchant_id": "merchant_2"}, "charge_not_found"),
        (None, {"currency": "EUR"}, "currency_mismatch"),
    ],
)
def test_refunds_of_no_such_charge_are_refused(
    harness: Harness, reference: str | None, overrides: dict[str, str], code: str
) -> None:
    charged = charge(harness)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(refund("rf_1", reference or charged.processor_charge_id, 100, **overrides))

    assert refused.value.code == code
    assert count(harness.sandbox, "refunds") == 0


@pytest.mark.parametrize("token", ["tok_declined", "tok_pending"])
def test_a_charge_that_has_not_succeeded_is_not_refundable(harness: Harness, token: str) -> None:
    charged = charge(harness, token)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(refund("rf_1", charged.processor_charge_id, 100))

    assert refused.value.code == "charge_not_refundable"


def test_refunds_of_tok_refund_declined_fail_and_reserve_nothing(harness: Harness) -> None:
    charged = charge(harness, "tok_refund_declined")

    failed = harness.processor.refund(refund("rf_1", charged.processor_charge_id, 1_000))

    assert (failed.status, failed.failure_code) == ("failed", "refund_declined")
    again = harness.processor.refund(refund("rf_2", charged.processor_charge_id, 1_000))
    assert again.status == "failed", "a failed refund does not count toward the amount"


def test_concurrent_refunds_never_pass_the_amount_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    charged = sandbox_on_backend.charge(ChargeRequest("pay_1", "merchant_1", 1_000, "USD", "tok_ok"))
    barrier = threading.Barrier(8)

    def one(index: int) -> RefundResult | str:
        barrier.wait()
        try:
            return sandbox_on_backend.refund(refund(f"rf_{index}", charged.processor_charge_id, 300))
        except ProcessorRefused as refused:
            return refused.code

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))

    succeeded = [result for result in results if isinstance(result, RefundResult)]
    assert len(succeeded) == 3  # 3 * 300 <= 1000 < 4 * 300
    assert sorted(result for result in results if isinstance(result, str)) == ["over_refund"] * 5
    assert count(sandbox_on_backend, "refunds") == 3
