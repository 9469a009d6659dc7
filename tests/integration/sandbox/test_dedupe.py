"""A request id is processed once: repeats answer the original result, other parameters are
refused, and concurrent duplicates make exactly one charge (the unique key decides)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from paycore.processor.port import ChargeRequest, ProcessorRefused, RefundRequest
from paycore_sandbox import Sandbox
from tests.integration.sandbox.conftest import Harness, count

T = TypeVar("T")
THREADS = 8
CHARGE = ChargeRequest("pay_1", "merchant_1", 5_000, "EUR", "tok_ok", description="order 1")


def all_at_once(work: Callable[[int], T]) -> list[T | BaseException]:
    """Run `work(i)` on THREADS threads released together; results or the exceptions raised."""
    barrier = threading.Barrier(THREADS)

    def run(index: int) -> T | BaseException:
        barrier.wait()
        try:
            return work(index)
        except Exception as error:
            return error

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(run, range(THREADS)))


def test_same_charge_twice_is_one_charge(harness: Harness) -> None:
    first = harness.processor.charge(CHARGE)
    second = harness.processor.charge(CHARGE)

    assert second == first
    assert count(harness.sandbox, "charges") == 1
    assert count(harness.sandbox, "webhooks") == 1


@pytest.mark.parametrize(
    "changed",
    [
        ChargeRequest("pay_1", "merchant_1", 5_001, "EUR", "tok_ok", description="order 1"),
        ChargeRequest("pay_1", "merchant_2", 5_000, "EUR", "tok_ok", description="order 1"),
        ChargeRequest("pay_1", "merchant_1", 5_000, "USD", "tok_ok", description="order 1"),
        ChargeRequest("pay_1", "merchant_1", 5_000, "EUR", "tok_declined", description="order 1"),
        ChargeRequest("pay_1", "merchant_1", 5_000, "EUR", "tok_ok", description=None),
    ],
)
def test_same_charge_id_other_parameters_is_refused(harness: Harness, changed: ChargeRequest) -> None:
    original = harness.processor.charge(CHARGE)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.charge(changed)

    assert refused.value.code == "request_id_reused"
    assert harness.processor.get_charge("pay_1") == original
    assert count(harness.sandbox, "charges") == 1


def test_same_refund_twice_is_one_refund_and_other_parameters_are_refused(harness: Harness) -> None:
    charge = harness.processor.charge(CHARGE)
    refund = RefundRequest("rf_1", "merchant_1", charge.processor_charge_id, 2_000, "EUR")

    first = harness.processor.refund(refund)
    assert harness.processor.refund(refund) == first
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(RefundRequest("rf_1", "merchant_1", charge.processor_charge_id, 2_001, "EUR"))

    assert refused.value.code == "request_id_reused"
    assert count(harness.sandbox, "refunds") == 1
    assert harness.processor.get_refund("rf_1") == first


def test_repeat_of_a_refund_is_answered_even_once_the_charge_is_fully_refunded(harness: Harness) -> None:
    charge = harness.processor.charge(CHARGE)
    refund = RefundRequest("rf_1", "merchant_1", charge.processor_charge_id, 5_000, "EUR")

    first = harness.processor.refund(refund)

    assert harness.processor.refund(refund) == first  # not over_refund: it is the same refund


def test_concurrent_duplicate_charges_through_a_transport_make_one_charge(harness: Harness) -> None:
    results = all_at_once(lambda _: harness.processor.charge(CHARGE))

    assert not [result for result in results if isinstance(result, BaseException)]
    assert len({result.processor_charge_id for result in results if not isinstance(result, BaseException)}) == 1
    assert count(harness.sandbox, "charges") == 1
    assert count(harness.sandbox, "webhooks") == 1


def test_concurrent_duplicate_charges_make_one_charge_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    results = all_at_once(lambda _: sandbox_on_backend.charge(CHARGE))

    assert not [result for result in results if isinstance(result, BaseException)]
    assert len({result.processor_charge_id for result in results if not isinstance(result, BaseException)}) == 1
    assert count(sandbox_on_backend, "charges") == 1


def test_concurrent_duplicate_refunds_make_one_refund_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    charge = sandbox_on_backend.charge(CHARGE)
    refund = RefundRequest("rf_1", "merchant_1", charge.processor_charge_id, 4_000, "EUR")

    results = all_at_once(lambda _: sandbox_on_backend.refund(refund))

    assert not [result for result in results if isinstance(result, BaseException)]
    assert len({result for result in results}) == 1
    assert count(sandbox_on_backend, "refunds") == 1
