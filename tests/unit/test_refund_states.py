"""The refund transition table and what the processor's evidence proves, without a database."""

from __future__ import annotations

import pytest

from paycore.lifecycle import columns
from paycore.lifecycle.evidence import Evidence
from paycore.processor.port import RefundResult
from paycore.refunds import states
from paycore.refunds.lifecycle import MACHINE, decide, matches, target_of
from paycore.refunds.models import STATUSES
from paycore.refunds.types import Refund

ALL = STATUSES


def result(status: str, amount_minor: int = 5, failure_code: str | None = None) -> Evidence[RefundResult]:
    return Evidence.of_result(RefundResult("rf_1", status, "re_1", amount_minor, "USD", failure_code))  # type: ignore[arg-type]


def refund(status: str = "processing", amount_minor: int = 5) -> Refund:
    return Refund(
        tenant_id="t",
        id="rf_1",
        payment_id="pay_1",
        idempotency_key=None,
        amount_minor=amount_minor,
        currency="USD",
        reason=None,
        status=status,
        failure_code=None,
        processor_request_id="rf_1",
        processor_reference=None,
        transfer_id=None,
        **columns.fresh(),
        created_at_us=0,
        updated_at_us=0,
    )


def test_the_table_is_the_one_the_machine_uses_and_names_only_known_states() -> None:
    assert MACHINE.transitions is states.TRANSITIONS and MACHINE.terminal is states.TERMINAL
    assert {state for pair in states.TRANSITIONS for state in pair} <= set(ALL)


def test_terminal_states_never_change() -> None:
    for terminal in states.TERMINAL:
        assert not any(states.allowed(terminal, other) for other in ALL)


def test_only_a_person_leaves_requires_approval() -> None:
    assert {to for to in ALL if states.allowed("requires_approval", to)} == {"pending", "canceled"}


def test_in_doubt_only_goes_forward_by_evidence() -> None:
    assert {to for to in ALL if states.allowed("in_doubt", to)} == {"succeeded", "failed"}


def test_only_failed_and_canceled_release_the_amount() -> None:
    assert {"failed", "canceled"} == states.RELEASED and states.RELEASED <= states.TERMINAL


@pytest.mark.parametrize("current", ["pending", "processing", "in_doubt"])
def test_no_answer_never_fails_or_succeeds_a_refund(current: str) -> None:
    for kind in ("unreachable", "not_found"):
        target, _ = target_of(current, Evidence(kind))
        assert target == ("in_doubt" if current == "processing" else None)


def test_results_and_refusals_map_to_states() -> None:
    assert target_of("in_doubt", result("succeeded")) == ("succeeded", None)
    assert target_of("processing", result("failed", failure_code="expired_card")) == ("failed", "expired_card")
    assert target_of("processing", result("failed")) == ("failed", "refund_failed")
    assert target_of("processing", result("pending")) == (None, None)
    assert target_of("processing", Evidence("refused", refusal_code="invalid_amount")) == ("failed", "invalid_amount")


def test_a_reused_request_id_proves_nothing() -> None:
    """The processor holds something under this request id: treated like no answer."""
    assert target_of("processing", Evidence("refused", refusal_code="request_id_reused")) == ("in_doubt", None)
    assert target_of("in_doubt", Evidence("refused", refusal_code="request_id_reused")) == (None, None)


def test_a_decision_carries_the_failure_code_and_the_processor_reference() -> None:
    decision = decide("processing", result("failed", failure_code="expired_card"))
    assert decision.path == ("failed",)
    assert decision.values == {"processor_reference": "re_1", "failure_code": "expired_card"}
    assert decision.data == {"failure_code": "expired_card"}
    assert decide("processing", result("pending")).path == ()


def test_a_result_for_another_amount_does_not_match() -> None:
    assert matches(refund(), result("succeeded").result)  # type: ignore[arg-type]
    assert not matches(refund(amount_minor=6), result("succeeded").result)  # type: ignore[arg-type]
