"""A refund's creating phase, planned (ADR 0026 step 3): pure, so tested without a database.
That its rows are the reference path's, written, is
tests/integration/refunds/test_create_data_plane.py's."""

from __future__ import annotations

import json

import pytest

from paycore.audit.rows import EventContext
from paycore.audit.service import Event
from paycore.idempotency.service import KeyScope
from paycore.kit import actors
from paycore.kit.errors import InvalidAmount
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger.limits import Totals
from paycore.refunds.create_plan import (
    NewIds,
    PaymentFacts,
    Plan,
    RefundRequest,
    birth_event,
    check_amount,
    needs_approval,
    plan_create,
)
from paycore.refunds.types import Refund

IDS = NewIds("rf_1", "txn_1", "ent_d", "ent_c", "evt_1")
NOW_US = 1_700_000_000_000_000
SCOPE = KeyScope("acme", "key-1", "f" * 64, now_us=NOW_US, expires_at_us=None)
FACTS = PaymentFacts("USD", "acct_dest")
RENDERED: list[tuple[Refund, list[Event]]] = []


def render(refund: Refund, history: list[Event]) -> str:
    RENDERED.append((refund, history))
    return json.dumps({"id": refund.id, "history": [event.cause for event in history]})


def planned(amount_minor: int = 400, context: EventContext = EventContext(None, None)) -> Plan:
    request = RefundRequest("pay_1", amount_minor, "damaged", actors.LOCAL)
    return plan_create(
        SCOPE, request, FACTS, clearing_account_id="acct_clear", context=context, new_ids=IDS, render=render
    )


def test_the_refund_is_born_pending_and_due_at_once() -> None:
    refund = planned().refund
    assert (refund.id, refund.payment_id, refund.status, refund.amount_minor, refund.currency) == (
        "rf_1",
        "pay_1",
        "pending",
        400,
        "USD",
    )
    assert refund.next_attempt_at_us == refund.created_at_us == NOW_US
    assert refund.processor_request_id == refund.id and refund.idempotency_key == "key-1"
    assert refund.transfer_id == "txn_1"


def test_the_hold_moves_pending_totals_from_the_destination_to_clearing() -> None:
    plan = planned()
    destination, clearing = plan.entries
    assert (destination.id, destination.account_id, destination.direction) == ("ent_d", "acct_dest", "debit")
    assert (clearing.id, clearing.account_id, clearing.direction) == ("ent_c", "acct_clear", "credit")
    assert destination.delta == Totals(0, 0, 400, 0) and clearing.delta == Totals(0, 0, 0, 400)
    assert plan.clearing_code == "processor.clearing.USD"
    transfer = plan.transfer_row
    assert (transfer["kind"], transfer["owner_id"], transfer["reference_type"]) == ("pending", "rf_1", "refund")


def test_the_answer_is_built_from_the_refund_and_the_event_it_writes() -> None:
    """Never read back: the history is the one birth event the plan writes, and the key's row
    holds the answer."""
    RENDERED.clear()
    plan = planned(context=EventContext("req_9", None))
    [(refund, history)] = RENDERED
    assert refund == plan.refund
    assert history == [birth_event(plan.event_row)]
    [event] = history
    assert (event.from_state, event.to_state, event.cause) == (None, "pending", "refund_requested")
    assert event.actor == actors.LOCAL
    assert event.data == {"request_id": "req_9"} and event.sequence == 1
    assert event.snapshot is not None and event.snapshot["id"] == "rf_1" and event.snapshot["status"] == "pending"
    assert (plan.answer.status, plan.answer.body) == (201, '{"id": "rf_1", "history": ["refund_requested"]}')
    assert plan.key_row == SCOPE.row(plan.answer)


@pytest.mark.parametrize("amount_minor", [0, -1, AMOUNT_MINOR_MAX + 1])
def test_a_bad_amount_is_refused_as_the_reference_path_refuses_it(amount_minor: int) -> None:
    with pytest.raises(InvalidAmount):
        planned(amount_minor)
    with pytest.raises(InvalidAmount):
        check_amount(amount_minor)


def test_the_largest_amount_is_planned() -> None:
    assert planned(AMOUNT_MINOR_MAX).refund.amount_minor == AMOUNT_MINOR_MAX


@pytest.mark.parametrize(
    ("refunded_minor", "threshold_minor", "waits"),
    [(100, None, False), (100, 100, False), (101, 100, True), (1, 0, True), (0, 0, False)],
)
def test_four_eyes_by_sum_waits_past_the_threshold_only(
    refunded_minor: int, threshold_minor: int | None, waits: bool
) -> None:
    assert needs_approval(refunded_minor, threshold_minor) is waits
