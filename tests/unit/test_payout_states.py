"""The payout transition table and what the bank's evidence proves, without a database."""

from __future__ import annotations

import dataclasses

import pytest

from paycore.lifecycle.evidence import Evidence
from paycore.payouts import states
from paycore.payouts.lifecycle import MACHINE, SEND_OPERATION, decide, matches
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult

ALL = states.STATUSES


def payout() -> Payout:
    fields = {field.name: None for field in dataclasses.fields(Payout)}
    values = {"amount_minor": 100, "currency": "EUR", "rail": "sepa", "status": states.SENT, "attempts": 0}
    return Payout(**{**fields, **values})  # type: ignore[arg-type]


def bank(status: str, amount_minor: int = 100, **fields: object) -> Evidence[PayoutResult]:
    return Evidence.of_result(PayoutResult("po_1", status, "bp_1", amount_minor, "EUR", "sepa", **fields))  # type: ignore[arg-type]


def test_the_table_is_the_one_the_machine_uses() -> None:
    assert MACHINE.transitions is states.TRANSITIONS and MACHINE.terminal is states.TERMINAL
    assert {state for pair in states.TRANSITIONS for state in pair} <= set(ALL)


def test_terminal_states_never_change() -> None:
    for terminal in states.TERMINAL:
        assert not any(states.allowed(terminal, other) for other in ALL)


def test_only_scheduled_and_queued_can_be_canceled() -> None:
    assert {state for state in ALL if states.allowed(state, states.CANCELED)} == set(states.CANCELABLE)


def test_in_doubt_leaves_only_by_the_bank_s_answer() -> None:
    assert {to for to in ALL if states.allowed(states.IN_DOUBT, to)} == {states.SENT, states.FAILED}


@pytest.mark.parametrize(
    ("current", "status", "path"),
    [
        (states.PROCESSING, "accepted", (states.SENT,)),
        (states.IN_DOUBT, "settled", (states.SENT, states.SETTLED)),
        (states.PROCESSING, "returned", (states.SENT, states.SETTLED)),  # the return itself: its window first
        (states.SENT, "rejected", (states.FAILED,)),
        (states.SENT, "accepted", ()),  # already there
        (states.SETTLED, "returned", ()),  # record_bank_return's own step
        (states.FAILED, "settled", (states.SETTLED,)),  # not allowed from failed: stale
    ],
)
def test_a_late_answer_proves_every_step_to_it_in_order(current: str, status: str, path: tuple[str, ...]) -> None:
    assert decide(current, bank(status)).path == path


def test_a_rejection_carries_the_bank_s_code() -> None:
    decision = decide(states.PROCESSING, bank("rejected", failure_code="AC04"))
    assert decision.values["failure_code"] == "AC04" and decision.values["bank_reference"] == "bp_1"
    assert decide(states.PROCESSING, bank("rejected")).values["failure_code"] == "bank_rejected"


def test_only_a_refused_send_fails_a_payout() -> None:
    refused: Evidence[PayoutResult] = Evidence("refused", refusal_code="invalid_iban", operation=SEND_OPERATION)
    assert decide(states.PROCESSING, refused).path == (states.FAILED,)
    assert decide(states.PROCESSING, refused).values == {"failure_code": "invalid_iban"}
    assert decide(states.IN_DOUBT, Evidence("refused", refusal_code="x", operation="get_payout")).path == ()


@pytest.mark.parametrize("current", [states.PROCESSING, states.IN_DOUBT, states.SENT])
def test_no_answer_never_moves_money(current: str) -> None:
    for kind in ("unreachable", "not_found"):
        path = decide(current, Evidence(kind)).path
        assert path == ((states.IN_DOUBT,) if kind == "unreachable" and current == states.PROCESSING else ())


def test_an_answer_about_another_payout_does_not_match() -> None:
    assert matches(payout(), bank("settled").result)  # type: ignore[arg-type]
    assert not matches(payout(), bank("settled", amount_minor=99).result)  # type: ignore[arg-type]
    assert not matches(payout(), bank("returned", return_amount_minor=101).result)  # type: ignore[arg-type]
    assert matches(payout(), bank("returned", return_amount_minor=90).result)  # type: ignore[arg-type]
