"""The bank's webhook that moves a payout, planned for the data plane (ADR 0026 step 3): pure
functions from a verified payout event and the payout it names, as read, to every row the
reference path (`inbound.service.receive`) writes when the event moves the payout one step.

The case: a payout event saying `accepted` (to `sent`: the hold posted) or `rejected` (to
`failed`: the hold voided) for a payout still `processing` or `in_doubt` (the bank's answer to
the send was lost), of the event's amount, currency and rail. The reference path stores the
event, loads the payout, applies the evidence (`payouts.service.apply_evidence`: the
compare-and-set, the hold posted or voided, the state event), records the event on the payout's
audit log as `applied`, and marks the stored event `applied`, tried once, done. The plan holds
those rows: the stored event, the move (`payouts.settle_plan.plan_move`, the one home of a
payout's settle on the data plane, with the webhook's cause and the processor as actor), and
the audit event (`audit.webhook_row`).

The plain case has its plan too (`plan_confirm`): the usual one, the bank's synchronous answer
having moved the payout to `sent` first, its `accepted` webhook only confirms (or comes after
the settlement, or is a redelivery). The reference path finds nothing to do (`no_change`, no
contradiction: an `accepted` contradicts only a `failed` payout) and writes two rows: the stored
event `stale`, tried once, done, and the audit event, its cause `no_change`. Everything else has
no plan: a `settled` or `returned` word (two steps, the bank's fee, a return), a payout in any
other status, a mismatch.
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
from paycore.payouts import service as payouts
from paycore.payouts import settle_plan, states
from paycore.payouts.settle_plan import Move, NewIds
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult, PayoutStatus

# The bank's words the data plane writes: each moves a waiting payout one step.
ONE_STEP_STATUSES: Final = ("accepted", "rejected")


@dataclass(frozen=True)
class Plan:
    webhook: dict[str, Any]  # the stored event as the reference path leaves it (`receive_plan.WEBHOOK_COLUMNS`)
    move: Move  # the payout's compare-and-set, its hold's resolution, its state event
    audit_event: dict[str, Any]  # the event on the payout's audit log (`audit.webhook_row`)

    @property
    def result(self) -> str:
        return APPLIED


def is_one_step(event: ProcessorEvent) -> bool:
    """A payout event that may move its payout one step: the data plane's to try."""
    data = event.data
    return data.object == "payout" and data.status in ONE_STEP_STATUSES and data.rail is not None


def payout_result(event: ProcessorEvent) -> PayoutResult:
    """The payout the event describes, as `service._apply_payout` reads it."""
    data = event.data
    assert data.rail is not None and data.status in ONE_STEP_STATUSES, data
    return PayoutResult(
        request_id=data.request_id,
        status=cast(PayoutStatus, data.status),
        bank_payout_id=data.bank_payout_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        rail=data.rail,
        batch_id=data.batch_id,
        fee_minor=data.fee_minor or 0,
        failure_code=data.failure_code,
        return_code=data.return_code,
        return_amount_minor=data.return_amount_minor,
        return_fee_minor=data.return_fee_minor or 0,
    )


def plan_apply_payout(
    event: ProcessorEvent,
    payload: str,
    payout: Payout,
    *,
    now_us: int,
    new_ids: NewIds,
    audit_event_id: str,
    context: EventContext,
) -> Plan | None:
    """The rows the reference path writes when `event` (its signed body `payload`) moves `payout`
    as read; None for the reference path."""
    if not is_one_step(event) or now_us <= payout.updated_at_us:
        return None  # a clock behind the payout's last change: `Machine.changes` would move it on
    result = payout_result(event)
    if not payouts.MACHINE.matches(payout, result):
        return None  # a mismatch: the reference path records it
    decision = payouts.MACHINE.decide(payout.status, Evidence.of_result(result))
    target = settle_plan.settled_status(payout, decision)
    if target is None:
        return None
    move = settle_plan.plan_move(
        payout, target, decision, cause=CAUSE, actor=actors.PROCESSOR, now_us=now_us, new_ids=new_ids, context=context
    )
    webhook = _webhook(event, payload, APPLIED, now_us)  # `service._settle`: applied, tried once, done
    audit_event = _audit_event(event, APPLIED, now_us, audit_event_id, context)
    plan = Plan(webhook, move, audit_event)
    _check_plan(plan)
    return plan


# The statuses in which an `accepted` changes nothing (`lifecycle.decide`: `already`).
CONFIRMED_STATUSES: Final = (states.SENT, states.SETTLED, states.RETURNED)
NO_CHANGE: Final = "no_change"  # the audit event's cause, as `service._apply_payout` records it


@dataclass(frozen=True)
class Confirmation:
    """The plain case's rows: the payout is past what the bank's `accepted` proves."""

    webhook: dict[str, Any]  # the stored event, `stale`, tried once, done
    payout: Payout  # as read: the write checks it is still in one of `CONFIRMED_STATUSES`
    audit_event: dict[str, Any]  # the event on the payout's audit log, its cause `no_change`

    @property
    def result(self) -> str:
        return receive_plan.STALE


def plan_confirm(
    event: ProcessorEvent, payload: str, payout: Payout, *, now_us: int, audit_event_id: str, context: EventContext
) -> Confirmation | None:
    """The rows the reference path writes when the bank's `accepted` finds `payout` sent already;
    None for everything else."""
    if not is_one_step(event) or event.data.status != "accepted" or payout.status not in CONFIRMED_STATUSES:
        return None
    assert not payouts.MACHINE.decide(payout.status, Evidence.of_result(payout_result(event))).path
    webhook = _webhook(event, payload, receive_plan.STALE, now_us)
    audit_event = _audit_event(event, NO_CHANGE, now_us, audit_event_id, context)
    assert audit_event["object_id"] == payout.id and audit_event["tenant_id"] == payout.tenant_id
    return Confirmation(webhook, payout, audit_event)


def _webhook(event: ProcessorEvent, payload: str, status: str, now_us: int) -> dict[str, Any]:
    """The stored event as `service._settle` leaves it: tried once, done."""
    data = event.data
    return {
        "tenant_id": data.merchant_id,
        "event_id": event.id,
        "type": event.type,
        "object_type": data.object,
        "request_id": data.request_id,
        "payload": payload,
        "status": status,
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": now_us,
        "processed_at_us": now_us,
    }


def _audit_event(
    event: ProcessorEvent, result: str, now_us: int, audit_event_id: str, context: EventContext
) -> dict[str, Any]:
    """The event on the payout's audit log, as `service._record` writes it."""
    data = event.data
    return webhook_row(
        data.merchant_id,
        event_id=audit_event_id,
        context=context,
        object_type=payouts.MACHINE.object_type,
        object_id=data.request_id,
        event_type=event.type,
        result=result,
        payload={"event_id": event.id, "sequence": event.sequence, "status": data.status},
        now_us=now_us,
    )


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the stored event, the state event and the audit event say the same, at
    the same time, of the same payout (the move's own are `settle_plan.check_move`'s)."""
    move, webhook, audit_event = plan.move, plan.webhook, plan.audit_event
    assert webhook.keys() == set(receive_plan.WEBHOOK_COLUMNS), webhook.keys() ^ set(receive_plan.WEBHOOK_COLUMNS)
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert (
        webhook["created_at_us"]
        == webhook["processed_at_us"]
        == audit_event["created_at_us"]
        == move.payout.updated_at_us
        == move.state_event["created_at_us"]
    )
    assert audit_event["object_id"] == webhook["request_id"] == move.payout.id
    assert audit_event["tenant_id"] == webhook["tenant_id"] == move.payout.tenant_id
    assert audit_event["actor"] == move.state_event["actor"] == actors.PROCESSOR
    assert move.state_event["cause"] == CAUSE and audit_event["type"] == f"webhook.{webhook['type']}"
