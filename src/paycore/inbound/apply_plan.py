"""The processor's webhook, *apply*, planned for the data plane (ADR 0026 step 3): pure
functions from a verified charge event and the payment it names, as read, to every row the
reference path (`inbound.service.receive`) writes when the event moves the payment.

The case: a `charge.succeeded` or `charge.failed` event for an automatic payment still
`processing` (the processor answered `pending`) or `in_doubt` (its answer was lost), with no
capture or cancel in flight, of the event's amount and currency. The reference path stores the
event, loads the payment, applies the evidence (`payments.service.apply_evidence`: the
compare-and-set, the hold posted or voided, the state event), records the event on the
payment's audit log as `applied`, and marks the stored event `applied`, tried once, done. The
plan holds those rows: the stored event, the move (`settle_plan.plan_move`, the one home of a
settle's compare-and-set, hold and state event, with the webhook's cause and the processor as
actor), and the audit event (`audit.webhook_row`).

The creating request's answer is the one row the plan does not make: the reference path writes
it only when none is recorded, which for a payment `processing` means the request itself has
not answered yet (a webhook that overtook it); the write checks it is recorded, and leaves that
race to the reference path. Everything else has no plan: another event, a payment in any other
status, a manual one, an operation in flight, a mismatch, a clock behind the payment's last
change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext, webhook_row
from paycore.inbound import receive_plan
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.lifecycle.evidence import Evidence
from paycore.payments import service as payments
from paycore.payments import settle_plan, states
from paycore.payments.settle_plan import Move, NewIds
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

APPLIED: Final = "applied"  # what `receive` answers, the stored event's status, the audit event's cause
CAUSE: Final = "webhook"  # the state change's cause, as `service._apply_charge` moves it


@dataclass(frozen=True)
class Plan:
    webhook: dict[str, Any]  # the stored event as the reference path leaves it (`receive_plan.WEBHOOK_COLUMNS`)
    move: Move  # the payment's compare-and-set, its hold's resolution, its state event
    audit_event: dict[str, Any]  # the event on the payment's audit log (`audit.webhook_row`)

    @property
    def result(self) -> str:
        return APPLIED


def plan_apply(
    event: ProcessorEvent,
    payload: str,
    payment: Payment,
    result: ChargeResult,
    *,
    now_us: int,
    new_ids: NewIds,
    audit_event_id: str,
    context: EventContext,
) -> Plan | None:
    """The rows the reference path writes when `event` (its signed body `payload`; `result`, the
    charge it describes, `service.charge_result`) moves `payment` as read; None for the
    reference path."""
    target = receive_plan.plain_status(event)
    if target is None or not _movable(payment, result, now_us):
        return None
    decision = payments.MACHINE.decide(payment.status, Evidence.of_result(result))
    if decision.path != (target,) or not decision.values.keys() <= {"processor_reference", "failure_code"}:
        return None
    move, changed = settle_plan.plan_move(
        payment, target, decision, cause=CAUSE, actor=actors.PROCESSOR, now_us=now_us, new_ids=new_ids, context=context
    )
    data = event.data
    webhook = {
        "tenant_id": data.merchant_id,
        "event_id": event.id,
        "type": event.type,
        "object_type": data.object,
        "request_id": data.request_id,
        "payload": payload,
        "status": APPLIED,  # `service._settle`: applied, tried once, done
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": now_us,
        "processed_at_us": now_us,
    }
    audit_event = webhook_row(
        data.merchant_id,
        event_id=audit_event_id,
        context=context,
        object_type=payments.MACHINE.object_type,
        object_id=data.request_id,
        event_type=event.type,
        result=APPLIED,
        payload={"event_id": event.id, "sequence": event.sequence, "status": data.status},
        now_us=now_us,
    )
    plan = Plan(webhook, move, audit_event)
    _check_plan(plan, changed)
    return plan


def _movable(payment: Payment, result: ChargeResult, now_us: int) -> bool:
    """An automatic payment waiting for the processor's word, nothing else in flight, the
    event's amount and currency, and a clock past its last change (`Machine.changes` would
    otherwise move the change's time on, which the reference path reads under its lock)."""
    return (
        payment.status in states.UNRESOLVED
        and not payment.is_manual
        and payment.operation is None
        and result.capture == "automatic"
        and payments.MACHINE.matches(payment, result)
        and now_us > payment.updated_at_us
    )


def _check_plan(plan: Plan, changed: set[str]) -> None:
    """Pair assertions: the move's own (`settle_plan.check_move`); a terminal move from
    `processing` or `in_doubt`, the hold resolved; the stored event, the state event and the audit
    event say the same, at the same time, of the same payment."""
    move, webhook, audit_event = plan.move, plan.webhook, plan.audit_event
    settle_plan.check_move(move, changed)
    assert move.payment.status in states.TERMINAL and move.expected_status in states.UNRESOLVED, move.payment
    assert move.hold in (settle_plan.POST, settle_plan.VOID) and move.payment.operation is None
    assert webhook.keys() == set(receive_plan.WEBHOOK_COLUMNS), webhook.keys() ^ set(receive_plan.WEBHOOK_COLUMNS)
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert (
        webhook["created_at_us"]
        == webhook["processed_at_us"]
        == audit_event["created_at_us"]
        == move.payment.updated_at_us
        == move.state_event["created_at_us"]
    )
    assert audit_event["object_id"] == webhook["request_id"] == move.payment.id
    assert audit_event["tenant_id"] == webhook["tenant_id"] == move.payment.tenant_id
    assert audit_event["actor"] == move.state_event["actor"] == actors.PROCESSOR
    assert move.state_event["cause"] == CAUSE and audit_event["type"] == f"webhook.{webhook['type']}"
