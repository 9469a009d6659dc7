"""The processor's webhook that moves a payment, on the data plane (ADR 0026 step 3): the data of
the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payment.

`receive.py` comes here when the plain case (a payment already in the status the event proves,
`receive_plan.py`) did not hold. The case: a `charge.succeeded` or `charge.failed` event for an
automatic payment still `processing` (the processor answered `pending`) or `in_doubt` (its answer
was lost), with no capture or cancel in flight, of the event's amount and currency, its creating
request answered already. The move is the payment's settle (`payments.move_plan.plan_move`, the
one home of a settle's compare-and-set, hold and state event, with the webhook's cause and the
processor as actor), written by `payments.settle_repository.write_move` on SQLite (after the
payment's read, its creating request's answer checked by the event's INSERT:
`Writing.answered_key`) and by migration `*_inbound_apply_payment.py`'s
`paycore_inbound_apply_payment` (around `paycore_payments_settle`) on PostgreSQL.

That function reads the payment itself, under its row lock, checks it as
`move_plan.terminal_status` and the shape's planner do (the status, an automatic payment,
nothing in flight, the amount and currency, a clock past its last change: PC013 otherwise; keep
the two together), and makes the
state event's `from_state` and snapshot from it: on PostgreSQL the plan is the event's alone
(`call_move`, a `CallMove`), and the phase is one call with no read before it.

No plain case here: a payment already in the status its event proves is `receive.py`'s. A
creating request not yet answered (the reference path writes its answer with the move), an
authorization's event, a payment in any other status, a manual one, an operation in flight, a
mismatch and a clock behind the payment's last change are the reference path's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from paycore.audit.rows import EventContext, state_change_row
from paycore.in_doubt.plane import hold_resolution_ids
from paycore.inbound import apply_object_repository, events, receive_plan
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Plan, Planning
from paycore.inbound.apply_object_repository import Writing, stored_event_params
from paycore.inbound.schemas import ProcessorEvent
from paycore.lifecycle.evidence import Evidence
from paycore.payments import move_plan, settle_repository, states
from paycore.payments import service as payments
from paycore.payments.settle_types import NewIds
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult


def is_settling(event: ProcessorEvent) -> bool:
    """A charge event proving `succeeded` or `failed` of an automatic payment: the data plane's to try."""
    return receive_plan.plain_status(event) is not None and (event.data.capture or "automatic") == "automatic"


def charge_result(event: ProcessorEvent) -> ChargeResult:
    """The charge the event describes, as the reference path reads it."""
    return events.charge_result(event.data)


@dataclass(frozen=True)
class CallMove:
    """PostgreSQL: the move as far as the event says it; the function reads the payment (under
    its lock) for the rest: the expected status, the key, the hold's amount, transfer and
    accounts, the state event's `from_state` and snapshot."""

    status: str  # what the event proves: succeeded (the hold posted) or failed (voided)
    failure_code: str | None  # a decline's; None: the payment's stays (a success sets none)
    processor_reference: str
    amount_minor: int  # the charge's amount and currency: the payment's, or the reference path decides
    currency: str
    new_ids: NewIds  # the resolution's, its entries' (posted only), the state event's
    state_event: dict[str, Any]  # its type, cause, actor and data; `from_state` and snapshot made from the row

    @property
    def post(self) -> bool:
        return self.status == states.SUCCEEDED


def call_move(
    event: ProcessorEvent,
    result: ChargeResult,
    *,
    cause: str,
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
) -> CallMove | None:
    """The move from the event alone (the same decision from `processing` and `in_doubt`:
    evidence of a result does not depend on the status it finds); None for the reference path."""
    evidence = Evidence.of_result(result)
    decisions = [payments.MACHINE.decide(status, evidence) for status in sorted(states.UNRESOLVED)]
    assert all(other == decisions[0] for other in decisions), decisions
    decision = decisions[0]
    if len(decision.path) != 1 or not decision.values.keys() <= move_plan.AUTOMATIC_VALUES:
        return None
    target = decision.path[0]
    assert target == receive_plan.plain_status(event) and "processor_reference" in decision.values, decision
    state_event = state_change_row(
        event.data.merchant_id,
        event_id=new_ids.state_event_id,
        context=context,
        object_type=payments.MACHINE.object_type,
        object_id=event.data.request_id,
        from_state=None,  # the payment's status as the function reads it
        to_state=payments.MACHINE.public(target),
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=decision.data,
    )
    move = CallMove(
        target,
        decision.values.get("failure_code"),
        decision.values["processor_reference"],
        result.amount_minor,
        result.currency,
        new_ids,
        state_event,
    )
    assert state_event["type"] == f"payment.{move.status}" and "snapshot" not in state_event, state_event
    assert all((new_ids.resolution_id, new_ids.state_event_id))
    assert all((new_ids.debit_entry_id, new_ids.credit_entry_id)) or not move.post
    return move


def _apply_params(plan: Plan[Any]) -> tuple[Any, ...]:
    """`paycore_inbound_apply_payment`'s arguments, from the event's plan (`call_move`)."""
    webhook, audit_event, move = plan.webhook, plan.audit_event, plan.move
    assert isinstance(move, CallMove), "planned from the event alone: the function reads the payment"
    state_event, new_ids = move.state_event, move.new_ids
    return (
        *stored_event_params(webhook),
        webhook["request_id"],
        webhook["created_at_us"],
        move.status,
        move.failure_code,
        move.processor_reference,
        move.amount_minor,
        move.currency,
        move.post,
        new_ids.resolution_id,
        [new_ids.debit_entry_id, new_ids.credit_entry_id] if move.post else [],
        state_event["id"],
        state_event["type"],
        state_event["cause"],
        state_event["actor"],
        state_event["data"],
        audit_event["id"],
        audit_event["type"],
        audit_event["data"],
        webhook["status"],
    )


def _no_confirmation(event: ProcessorEvent, payment: Payment) -> str | None:
    return None  # a payment already where its event says is `receive.py`'s plain case


PAYMENT: Final = ObjectApply(
    Planning(
        machine=payments.MACHINE,
        takes=is_settling,
        result_of=charge_result,
        settled_status=move_plan.terminal_status,
        plan_move=move_plan.plan_terminal_move,
        # The resolution, the clearing account's entry, the destination's, the state event (a
        # webhook has no call).
        new_ids=hold_resolution_ids(partial(NewIds, call_event_id="")),
        moved=lambda move: move.payment,
        confirmed_cause=_no_confirmation,
        call_move=call_move,
    ),
    Writing(
        write_move=settle_repository.write_move,
        apply_call=apply_object_repository.APPLY_PAYMENT,
        apply_params=_apply_params,
        answered_key=lambda move: (move.accepted.tenant_id, move.accepted.idempotency_key),
    ),
)
