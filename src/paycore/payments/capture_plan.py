"""A capture's and a cancel's two phases, planned (ADR 0026 step 3, ADR 0029): pure functions
from what the request asked and what the processor answered to every row each phase writes.

*begin* (before the processor's call): in, the request's key scope, the authorization as read
(`requires_capture`), the operation (`capture` | `cancel`), a capture's amount (None: all that
is capturable), the timings, the actor, the new event id and the audit context; out, the key
claimed *open*, the compare-and-set `requires_capture -> processing` (expected: the payment
exactly as read, its `updated_at_us` the token) storing the operation, the request's key and a
capture's amount, due to the resolver after `processing_stale_ms` (`operations._start`'s
values), and its state event. None where the reference path must answer: a payment not
`requires_capture` (409), an amount past what is capturable (422): refusals it records under
the key.

*finish* (after the call): in, the payment as begin wrote it and the call; out, the call's
event, the compare-and-set `processing -> succeeded` (captured) or `-> canceled` with the
processor's figures (`lifecycle.decide`, the one transition table's; columns by
`Machine.changes`), the hold posted for what was captured and the rest released in the same
step, or voided (`move_plan.hold_moved`), the state event, and the answer of the request's
key (`schemas.operation_outcome`: 200). A plan exists only for that common case, the processor
answering `captured` for the amount asked or `canceled`; anything else (a refusal, no answer,
an expiry, another outcome) is the reference path's (`operations.finish_by_reference`). The writers
(`capture_repository.py`) only send the plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.idempotency.service import KeyScope
from paycore.lifecycle import calls, recording
from paycore.lifecycle.calls import Call
from paycore.lifecycle.columns import NEXT_ATTEMPT_AT_US
from paycore.lifecycle.machine import replaced
from paycore.payments import lifecycle, move_plan, settle_plan, states
from paycore.payments.schemas import capturable_minor, operation_outcome
from paycore.payments.settle_types import POST, VOID, NewIds, Plan
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

MACHINE: Final = lifecycle.MACHINE
# The audit cause of the move a capture or cancel request makes, whoever asked (the API's key, a
# person in the console: the actor says who), as a refund's birth is `refund_requested`.
CAUSES: Final = {states.CAPTURE: "capture_requested", states.CANCEL: "cancel_requested"}
# What the processor's charge says when the operation happened, and the payment's status then.
_DONE: Final = {states.CAPTURE: ("captured", states.SUCCEEDED), states.CANCEL: ("canceled", states.CANCELED)}
# The columns begin's compare-and-set writes (`Machine.changes` of the move to `processing`).
BEGIN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "operation",
    "operation_idempotency_key",
    "capture_requested_minor",
    NEXT_ATTEMPT_AT_US,
)


@dataclass(frozen=True)
class BeginPlan:
    authorized: Payment  # as read: what the compare-and-set expects, exactly
    payment: Payment  # `processing`, the operation in flight: what the phase returns
    key_row: dict[str, Any]  # the request's key, claimed open (finish answers it)
    state_event: dict[str, Any]


def plan_begin(
    scope: KeyScope,
    authorized: Payment,
    operation: str,
    amount_minor: int | None,
    *,
    processing_stale_ms: int,
    actor: str,
    event_id: str,
    context: EventContext,
) -> BeginPlan | None:
    """Every row of a capture's or cancel's begin, or None for the reference path (its refusals)."""
    assert operation in _DONE and (operation == states.CAPTURE or amount_minor is None), (operation, amount_minor)
    if authorized.status != states.REQUIRES_CAPTURE or authorized.operation is not None:
        return None
    capturable = capturable_minor(authorized)
    requested = None
    if operation == states.CAPTURE:
        requested = capturable if amount_minor is None else amount_minor
        if not 0 < requested <= capturable:
            return None
    values = {
        "operation": operation,
        "operation_idempotency_key": scope.key,
        "capture_requested_minor": requested,
        NEXT_ATTEMPT_AT_US: scope.now_us + processing_stale_ms * 1000,
    }
    changes = MACHINE.changes(authorized, states.PROCESSING, scope.now_us, values)
    moved = replaced(authorized, changes)
    event = recording.event_row(
        MACHINE,
        moved,
        authorized.status,
        cause=CAUSES[operation],
        actor=actor,
        now_us=moved.updated_at_us,
        data=None,
        event_id=event_id,
        context=context,
    )
    plan = BeginPlan(authorized, moved, scope.row(None), event)
    assert set(changes) <= set(BEGIN_COLUMNS), set(changes) - set(BEGIN_COLUMNS)
    assert moved.status == states.PROCESSING and moved.operation == operation
    if operation == states.CAPTURE:
        assert 0 < (moved.capture_requested_minor or 0) <= capturable <= moved.amount_minor
    else:
        assert moved.capture_requested_minor is None
    assert moved.updated_at_us > authorized.updated_at_us and event["created_at_us"] == moved.updated_at_us
    assert (event["from_state"], event["to_state"]) == (states.REQUIRES_CAPTURE, states.PROCESSING)
    assert plan.key_row["response_status"] is None, "begin claims the key open: finish answers it"
    return plan


def plan_finish(
    started: Payment,
    call: Call[ChargeResult],
    *,
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
) -> Plan | None:
    """Every row of a capture's or cancel's finish (a settle plan: the same rows, the hold posted
    in part or voided, the answer the request's), or None for the reference path."""
    target = _done(started, call)
    if target is None or now_us <= started.updated_at_us:
        return None
    decision = lifecycle.decide(started.status, call.evidence)
    changes = MACHINE.changes(started, target, now_us, decision.values)
    moved = replaced(started, changes)
    captured_minor = moved.amount_captured_minor
    assert captured_minor is not None
    assert captured_minor == (started.capture_requested_minor if target == states.SUCCEEDED else 0), moved
    call_event = calls.event_row(
        started.tenant_id,
        object_type=MACHINE.object_type,
        object_id=started.id,
        call=call,
        attempt=None,
        actor=actor,
        now_us=now_us,
        event_id=new_ids.call_event_id,
        context=context,
    )
    state_event = recording.event_row(
        MACHINE,
        moved,
        started.status,
        cause=settle_plan.CAUSE,
        actor=actor,
        now_us=moved.updated_at_us,
        data=decision.data,
        event_id=new_ids.state_event_id,
        context=context,
    )
    clearing, destination, entries = move_plan.hold_moved(started.amount_minor, captured_minor, new_ids)
    assert started.operation_idempotency_key is not None
    plan = Plan(
        accepted=started,
        payment=moved,
        expected_status=started.status,
        hold=POST if target == states.SUCCEEDED else VOID,
        call_event=call_event,
        state_event=state_event,
        resolution_id=new_ids.resolution_id,
        clearing_code=move_plan.clearing_code(started.currency),
        clearing=clearing,
        destination=destination,
        entries=entries,
        answer=operation_outcome(moved),
        answer_key=started.operation_idempotency_key,
    )
    settle_plan.check_moves(plan, set(changes))
    assert plan.answer.status == 200 and moved.amount_capturable_minor == 0
    return plan


def _done(started: Payment, call: Call[ChargeResult]) -> str | None:
    """`succeeded` where the processor captured what was asked, `canceled` where it canceled
    the authorization as asked; None for anything else."""
    evidence = call.evidence
    if started.status != states.PROCESSING or started.operation not in _DONE or evidence.kind != "result":
        return None
    result = evidence.result
    assert isinstance(result, ChargeResult), evidence
    charge_status, target = _DONE[started.operation]
    if result.status != charge_status or not MACHINE.matches(started, result):
        return None
    if target == states.SUCCEEDED and result.amount_captured_minor != started.capture_requested_minor:
        return None
    decision = lifecycle.decide(started.status, evidence)
    if decision.path != (target,) or not MACHINE.allowed(started.status, target):
        return None
    return target
