"""The processor's webhook, *apply*, planned for the data plane (ADR 0026 step 3): pure
functions from a verified charge event (and, on SQLite, the payment it names, as read) to every
row the reference path (`inbound.service.receive`) writes when the event moves the payment.

The case: a `charge.succeeded` or `charge.failed` event for an automatic payment still
`processing` (the processor answered `pending`) or `in_doubt` (its answer was lost), with no
capture or cancel in flight, of the event's amount and currency. The reference path stores the
event, loads the payment, applies the evidence (`payments.service.apply_evidence`: the
compare-and-set, the hold posted or voided, the state event), records the event on the
payment's audit log as `applied`, and marks the stored event `applied`, tried once, done. The
plan holds those rows: the stored event, the move (`settle_plan.plan_move`, the one home of a
settle's compare-and-set, hold and state event, with the webhook's cause and the processor as
actor), and the audit event (`audit.webhook_row`).

Two plans of the same rows. On SQLite `plan_apply`, from the payment read in the write's own
transaction (BEGIN IMMEDIATE: nothing moves between). On PostgreSQL `plan_call`, from the event
alone, without a read: what needs the payment's row (the checks of `_movable`, the expected
status, the key, the hold's amount, transfer and accounts, the state event's `from_state` and
snapshot) is the server function's, which reads the row under its lock (migration
`*_inbound_apply_payment.py`); `CallPlan` holds the rest. Both refuse the same events
(`_proved`), and the function the same payments as `_movable`, so the reference path decides
exactly where it did when the caller read the payment itself.

The creating request's answer is the one row neither plan makes: the reference path writes
it only when none is recorded, which for a payment `processing` means the request itself has
not answered yet (a webhook that overtook it); the write checks it is recorded, and leaves that
race to the reference path. Everything else has no plan: another event, a payment in any other
status, a manual one, an operation in flight, a mismatch, a clock behind the payment's last
change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext, state_change_row, webhook_row
from paycore.inbound import receive_plan
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.lifecycle.evidence import Decision, Evidence
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
    proved = _proved(event, result)
    if proved is None or not _movable(payment, result, now_us):
        return None
    target, decision = proved
    move, changed = settle_plan.plan_move(
        payment, target, decision, cause=CAUSE, actor=actors.PROCESSOR, now_us=now_us, new_ids=new_ids, context=context
    )
    webhook = _webhook_row(event, payload, now_us)
    plan = Plan(webhook, move, _audit_row(event, audit_event_id, context, now_us))
    _check_plan(plan, changed)
    return plan


@dataclass(frozen=True)
class CallPlan:
    """PostgreSQL: the rows of `Plan` as far as the event says them; the server function reads
    the payment (under its lock) for the rest and checks it as `_movable` does."""

    webhook: dict[str, Any]  # the stored event (`receive_plan.WEBHOOK_COLUMNS`)
    status: str  # what the event proves: succeeded (the hold posted) or failed (voided)
    failure_code: str | None  # a decline's; None: the payment's stays (a success sets none)
    processor_reference: str | None
    amount_minor: int  # the charge's amount and currency: the payment's, or the reference path decides
    currency: str
    new_ids: NewIds  # the resolution's, its entries' (posted only), the state event's
    state_event: dict[str, Any]  # its type, cause, actor and data; `from_state` and snapshot made from the row
    audit_event: dict[str, Any]  # the event on the payment's audit log (`audit.webhook_row`)

    @property
    def post(self) -> bool:
        return self.status == states.SUCCEEDED

    @property
    def result(self) -> str:
        return APPLIED


def plan_call(
    event: ProcessorEvent,
    payload: str,
    result: ChargeResult,
    *,
    now_us: int,
    new_ids: NewIds,
    audit_event_id: str,
    context: EventContext,
) -> CallPlan | None:
    """`plan_apply`'s rows without the payment's row: None for the reference path where the
    event alone says so; the server function refuses the payments `_movable` refuses."""
    proved = _proved(event, result)
    if proved is None:
        return None
    target, decision = proved
    data = event.data
    state_event = state_change_row(
        data.merchant_id,
        event_id=new_ids.state_event_id,
        context=context,
        object_type=payments.MACHINE.object_type,
        object_id=data.request_id,
        from_state=None,  # the payment's status as the function reads it
        to_state=payments.MACHINE.public(target),
        cause=CAUSE,
        actor=actors.PROCESSOR,
        now_us=now_us,
        data=decision.data,
    )
    plan = CallPlan(
        webhook=_webhook_row(event, payload, now_us),
        status=target,
        failure_code=decision.values.get("failure_code"),
        processor_reference=decision.values["processor_reference"],
        amount_minor=result.amount_minor,
        currency=result.currency,
        new_ids=new_ids,
        state_event=state_event,
        audit_event=_audit_row(event, audit_event_id, context, now_us),
    )
    _check_call_plan(plan)
    return plan


def _proved(event: ProcessorEvent, result: ChargeResult) -> tuple[str, Decision] | None:
    """The terminal status a plain charge event proves of an automatic payment waiting on the
    processor, and the machine's decision of it (the same from `processing` and `in_doubt`:
    evidence of a result does not depend on the status it finds); None for the reference path."""
    target = receive_plan.plain_status(event)
    if target is None or result.capture != "automatic":
        return None
    evidence = Evidence.of_result(result)
    decisions = [payments.MACHINE.decide(status, evidence) for status in sorted(states.UNRESOLVED)]
    decision = decisions[0]
    if decision.path != (target,) or not decision.values.keys() <= {"processor_reference", "failure_code"}:
        return None
    assert all(other == decision for other in decisions), decisions
    assert target in (states.SUCCEEDED, states.FAILED) and "processor_reference" in decision.values, decision
    assert ("failure_code" in decision.values) == (target == states.FAILED), decision
    assert decision.values.get("failure_code", "") is not None, decision
    return target, decision


def _webhook_row(event: ProcessorEvent, payload: str, now_us: int) -> dict[str, Any]:
    data = event.data
    return {
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


def _audit_row(event: ProcessorEvent, audit_event_id: str, context: EventContext, now_us: int) -> dict[str, Any]:
    data = event.data
    return webhook_row(
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


def _movable(payment: Payment, result: ChargeResult, now_us: int) -> bool:
    """An automatic payment waiting for the processor's word, nothing else in flight, the
    event's amount and currency, and a clock past its last change (`Machine.changes` would
    otherwise move the change's time on, which the reference path reads under its lock). The
    server function of `plan_call` checks the same of the row it locks (migration
    `*_inbound_apply_payment.py`): keep the two together."""
    return (
        payment.status in states.UNRESOLVED
        and not payment.is_manual
        and payment.operation is None
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


def _check_call_plan(plan: CallPlan) -> None:
    """Pair assertions, as `_check_plan`'s where the event says them: the stored event, the state
    event and the audit event say the same, at the same time, of the same payment; the entries'
    ids given exactly when the hold is posted."""
    webhook, state_event, audit_event = plan.webhook, plan.state_event, plan.audit_event
    assert webhook.keys() == set(receive_plan.WEBHOOK_COLUMNS), webhook.keys() ^ set(receive_plan.WEBHOOK_COLUMNS)
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert webhook["created_at_us"] == webhook["processed_at_us"] == audit_event["created_at_us"]
    assert state_event["created_at_us"] == webhook["created_at_us"]
    assert state_event["object_id"] == audit_event["object_id"] == webhook["request_id"]
    assert state_event["tenant_id"] == audit_event["tenant_id"] == webhook["tenant_id"]
    assert audit_event["actor"] == state_event["actor"] == actors.PROCESSOR
    assert state_event["cause"] == CAUSE and state_event["type"] == f"payment.{plan.status}"
    assert "snapshot" not in state_event and state_event["from_state"] is None, "the function's, from the row"
    assert all((plan.new_ids.resolution_id, plan.new_ids.state_event_id))
    assert all((plan.new_ids.debit_entry_id, plan.new_ids.credit_entry_id)) or not plan.post
