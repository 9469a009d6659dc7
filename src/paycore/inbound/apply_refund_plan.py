"""The processor's webhook that settles a refund, planned for the data plane (ADR 0026 step 3):
pure functions from a verified refund event and the refund it names, as read, to every row the
reference path (`inbound.service.receive`) writes when the event moves the refund.

The case: a refund event saying `succeeded` or `failed` for a refund still `processing` (the
processor answered `pending`) or `in_doubt` (its answer was lost), with a hold, of the event's
amount and currency. The reference path stores the event, loads the refund, applies the
evidence (`refunds.service.apply_evidence`: the compare-and-set, the ceiling's release on a
failure, the hold posted or voided, the state event), records the event on the refund's audit
log as `applied`, and marks the stored event `applied`, tried once, done. The plan holds those
rows: the stored event, the move (`refunds.settle_plan.plan_move`, the one home of a refund's
settle on the data plane, with the webhook's cause and the processor as actor), and the audit
event (`audit.webhook_row`).

The plain case has its plan too (`plan_confirm`), as a payment's has (`receive_plan.py`): the
usual one, the processor's synchronous answer having settled the refund first, its webhook only
confirms (or a redelivery of the event that moved it): the refund is in the status the event
proves, of its amount and currency. The reference path finds no move allowed from a terminal
status (`stale`) and writes two rows: the stored event `stale`, tried once, done, and the audit
event. Everything else has no plan: the reference path's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

from paycore.audit.rows import EventContext, webhook_row
from paycore.inbound import receive_plan
from paycore.inbound.apply_plan import APPLIED, CAUSE
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.lifecycle.evidence import Evidence
from paycore.processor.port import RefundResult, ResultStatus
from paycore.refunds import service as refunds
from paycore.refunds import settle_plan, states
from paycore.refunds.settle_plan import Move, NewIds
from paycore.refunds.types import Refund

# The statuses a refund event proves that the data plane writes; `pending` changes nothing.
FINAL_STATUSES: Final = ("succeeded", "failed")


@dataclass(frozen=True)
class Plan:
    webhook: dict[str, Any]  # the stored event as the reference path leaves it (`receive_plan.WEBHOOK_COLUMNS`)
    move: Move  # the refund's compare-and-set, the ceiling's release, the hold's resolution, its state event
    audit_event: dict[str, Any]  # the event on the refund's audit log (`audit.webhook_row`)

    @property
    def result(self) -> str:
        return APPLIED


def is_final(event: ProcessorEvent) -> bool:
    """A refund event that may settle its refund: the data plane's to try."""
    return event.data.object == "refund" and event.data.status in FINAL_STATUSES


def refund_result(event: ProcessorEvent) -> RefundResult:
    """The refund the event describes, as `service._apply_refund` reads it."""
    data = event.data
    return RefundResult(
        request_id=data.request_id,
        status=cast(ResultStatus, data.status),  # checked against RESULT_STATUSES on receipt
        processor_refund_id=data.processor_refund_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        failure_code=data.failure_code,
    )


def plan_apply_refund(
    event: ProcessorEvent,
    payload: str,
    refund: Refund,
    *,
    now_us: int,
    new_ids: NewIds,
    audit_event_id: str,
    context: EventContext,
) -> Plan | None:
    """The rows the reference path writes when `event` (its signed body `payload`) moves `refund`
    as read; None for the reference path."""
    if not is_final(event) or now_us <= refund.updated_at_us:
        return None  # a clock behind the refund's last change: `Machine.changes` would move it on
    result = refund_result(event)
    if not refunds.MACHINE.matches(refund, result):
        return None  # a mismatch: the reference path records it
    decision = refunds.MACHINE.decide(refund.status, Evidence.of_result(result))
    target = settle_plan.settled_status(refund, decision)
    if target is None:
        return None
    move = settle_plan.plan_move(
        refund, target, decision, cause=CAUSE, actor=actors.PROCESSOR, now_us=now_us, new_ids=new_ids, context=context
    )
    webhook, audit_event = _rows(event, payload, APPLIED, now_us, audit_event_id, context)
    plan = Plan(webhook, move, audit_event)
    _check_plan(plan)
    return plan


@dataclass(frozen=True)
class Confirmation:
    """The plain case's rows: the refund is already in the status the event proves."""

    webhook: dict[str, Any]  # the stored event, `stale`, tried once, done
    refund: Refund  # as read: the write checks it is still in this status
    audit_event: dict[str, Any]  # the event on the refund's audit log, its cause `stale`

    @property
    def result(self) -> str:
        return receive_plan.STALE


def plan_confirm(
    event: ProcessorEvent, payload: str, refund: Refund, *, now_us: int, audit_event_id: str, context: EventContext
) -> Confirmation | None:
    """The rows the reference path writes when `event` finds `refund` already in the status it
    proves (`stale`); None for everything else."""
    if not is_final(event) or refund.status != event.data.status:
        return None
    if not refunds.MACHINE.matches(refund, refund_result(event)):
        return None  # a mismatch: the reference path records it
    assert refund.status in states.TERMINAL and not refunds.MACHINE.allowed(refund.status, refund.status)
    webhook, audit_event = _rows(event, payload, receive_plan.STALE, now_us, audit_event_id, context)
    assert webhook["status"] == audit_event["cause"] == receive_plan.STALE
    assert audit_event["object_id"] == refund.id and audit_event["tenant_id"] == refund.tenant_id
    return Confirmation(webhook, refund, audit_event)


def _rows(
    event: ProcessorEvent, payload: str, result: str, now_us: int, audit_event_id: str, context: EventContext
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stored event as `service._settle` leaves it (tried once, done) and the audit event
    `service._record` writes, both saying `result`."""
    data = event.data
    webhook = {
        "tenant_id": data.merchant_id,
        "event_id": event.id,
        "type": event.type,
        "object_type": data.object,
        "request_id": data.request_id,
        "payload": payload,
        "status": result,
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": now_us,
        "processed_at_us": now_us,
    }
    audit_event = webhook_row(
        data.merchant_id,
        event_id=audit_event_id,
        context=context,
        object_type=refunds.MACHINE.object_type,
        object_id=data.request_id,
        event_type=event.type,
        result=result,
        payload={"event_id": event.id, "sequence": event.sequence, "status": data.status},
        now_us=now_us,
    )
    return webhook, audit_event


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the stored event, the state event and the audit event say the same, at
    the same time, of the same refund (the move's own are `settle_plan.check_move`'s)."""
    move, webhook, audit_event = plan.move, plan.webhook, plan.audit_event
    assert webhook.keys() == set(receive_plan.WEBHOOK_COLUMNS), webhook.keys() ^ set(receive_plan.WEBHOOK_COLUMNS)
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert (
        webhook["created_at_us"]
        == webhook["processed_at_us"]
        == audit_event["created_at_us"]
        == move.refund.updated_at_us
        == move.state_event["created_at_us"]
    )
    assert audit_event["object_id"] == webhook["request_id"] == move.refund.id
    assert audit_event["tenant_id"] == webhook["tenant_id"] == move.refund.tenant_id
    assert audit_event["actor"] == move.state_event["actor"] == actors.PROCESSOR
    assert move.state_event["cause"] == CAUSE and audit_event["type"] == f"webhook.{webhook['type']}"
