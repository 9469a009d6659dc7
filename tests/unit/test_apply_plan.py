"""The processor's webhook that moves a payment, planned (ADR 0026 step 3): pure, so tested
without a database. That its rows are the reference path's, written, is
tests/integration/inbound/test_apply_data_plane.py's."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from paycore.audit.rows import EventContext
from paycore.inbound.apply_object_plan import APPLIED, CAUSE, plan_apply
from paycore.inbound.apply_payment import PAYMENT
from paycore.inbound.receive_plan import WEBHOOK_COLUMNS
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.payments import states
from paycore.payments.settle_types import NewIds
from paycore.payments.types import Payment
from tests.unit.test_receive_plan import event
from tests.unit.test_settle_plan import SETTLED_US, accepted

IDS = NewIds("", "evt_state", "txn_resolution", "ent_d", "ent_c")


def planned(payment: Payment, webhook: ProcessorEvent, now_us: int = SETTLED_US) -> Any:
    return plan_apply(
        PAYMENT.planning,
        webhook,
        '{"raw": true}',
        payment,
        now_us=now_us,
        new_ids=IDS,
        audit_event_id="evt_audit",
        context=EventContext("req_1", None),
    )


def charge(status: str, **data: Any) -> ProcessorEvent:
    failure = {"failure_code": "card_declined"} if status == "failed" else {}
    return event(type=f"charge.{status}", data={"status": status, **failure, **data})


@pytest.mark.parametrize("start", [states.PROCESSING, states.IN_DOUBT])
@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_a_payment_waiting_for_the_processor_is_moved_as_the_event_proves(start: str, status: str) -> None:
    payment = dataclasses.replace(accepted(), status=start)
    plan = planned(payment, charge(status))
    assert plan is not None and plan.result == APPLIED
    move = plan.move
    assert (move.expected_status, move.payment.status, move.hold) == (
        start,
        status,
        "post" if status == "succeeded" else "void",
    )
    assert move.payment.updated_at_us == SETTLED_US and move.payment.processor_reference == "ch_1"
    assert move.payment.failure_code == ("card_declined" if status == "failed" else None)
    assert (move.state_event["cause"], move.state_event["actor"]) == (CAUSE, actors.PROCESSOR)
    assert (move.state_event["from_state"], move.state_event["to_state"]) == (start, status)
    assert list(plan.webhook) == list(WEBHOOK_COLUMNS) and plan.webhook["status"] == APPLIED
    assert (plan.webhook["attempts"], plan.webhook["created_at_us"], plan.webhook["processed_at_us"]) == (
        1,
        SETTLED_US,
        SETTLED_US,
    )
    assert (plan.audit_event["cause"], plan.audit_event["type"]) == (APPLIED, f"webhook.charge.{status}")
    posted = 1_250 if status == "succeeded" else 0
    assert [entry.amount_minor for entry in move.entries] == ([posted, posted] if posted else [])


def test_everything_else_has_no_plan() -> None:
    waiting = accepted()
    cases = {
        "settled already": dataclasses.replace(waiting, status=states.SUCCEEDED),
        "an authorization": dataclasses.replace(waiting, capture_method="manual"),
        "a capture in flight": dataclasses.replace(waiting, operation=states.CAPTURE),
    }
    for name, payment in cases.items():
        assert planned(payment, charge("succeeded")) is None, name
    assert planned(waiting, charge("succeeded", amount_minor=1_251)) is None, "another amount"
    assert planned(waiting, charge("succeeded", currency="EUR")) is None, "another currency"
    assert planned(waiting, charge("succeeded", capture="manual")) is None, "an authorization's event"
    assert planned(waiting, event(type="charge.pending", data={"status": "pending"})) is None, "pending"
    assert planned(waiting, charge("succeeded"), now_us=waiting.updated_at_us) is None, "a clock behind"
    assert planned(waiting, charge("succeeded")) is not None, "the case itself"
