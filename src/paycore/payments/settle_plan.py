"""A payment's second phase, *settle*, planned (ADR 0026 step 3): pure functions from what the
first phase wrote and what the processor answered to every row the phase writes.

In: the payment as the accept phase wrote it (`processing`, its hold's transfer id), the call
to the processor (`lifecycle.calls.Call`: its evidence and what the audit log records of it),
the state changes the accept phase wrote (`accepted_history`: the answer's history is built
from them, never read back), the actor, the clock, the new ids and the audit context (request
and worker ids). Out: a `Plan` (`settle_types.py`) of every row: the call's audit event, the
move (`move_plan.plan_move`, the one home of a settle's move): the compare-and-set of the
payment (expected `processing`; the target decided by `lifecycle.decide`, the one transition
table's, and the columns by `Machine.changes`, the one home of what a move writes), the hold's
resolution (posted on success, voided on failure) with its entries and each account's deltas,
the state event with its snapshot; and the key's answer. No I/O here: the writers
(`settle_repository.py`) only send the plan.

A plan exists only for the common case: the processor answered `succeeded` or `failed` for the
payment as sent, or, for an authorization (`capture: "manual"`, ADR 0029), `requires_capture`
(the compare-and-set writes the authorization's amounts and lifetime, the hold stays pending:
no ledger row) or `failed`. Anything else (pending, no answer, a refusal, a mismatch) has no plan, and the
reference path (`service.create_payment`'s `finish`) decides, as it always has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.lifecycle import calls
from paycore.lifecycle.calls import Call
from paycore.lifecycle.evidence import Decision
from paycore.payments import accept_plan, lifecycle, states
from paycore.payments.move_plan import check_authorized, check_move, plan_move
from paycore.payments.schemas import creation_outcome
from paycore.payments.settle_types import KEEP, NewIds, Plan
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

MACHINE: Final = lifecycle.MACHINE
CAUSE: Final = "processor_answer"  # the cause of the change the request's own call proves
# What a terminal move's decision may carry: an authorization's figures go to `requires_capture`
# only, but a declined authorization keeps the lifetime the processor's decline names.
TERMINAL_VALUES: Final = frozenset({"processor_reference", "failure_code", "authorization_expires_at_us"})


@dataclass(frozen=True)
class HistoryEntry:
    """A state change written before this phase, as the answer's history shows it."""

    kind: str
    from_state: str | None
    to_state: str | None
    cause: str
    actor: str
    created_at_us: int


def accepted_history(payment: Payment, actor: str) -> tuple[HistoryEntry, ...]:
    """The state changes the accept phase wrote (`accept_plan.py`'s event row, or the reference
    path's `recording.create`): the payment's birth in `processing`, at its creation, by its actor."""
    assert payment.status == states.PROCESSING and payment.updated_at_us == payment.created_at_us, payment
    birth = HistoryEntry(
        "state_change", None, MACHINE.public(states.PROCESSING), accept_plan.CAUSE, actor, payment.created_at_us
    )
    return (birth,)


def history_entry(row: dict[str, Any]) -> HistoryEntry:
    """A state change's row as the answer's history shows it."""
    return HistoryEntry(
        row["kind"], row["from_state"], row["to_state"], row["cause"], row["actor"], row["created_at_us"]
    )


def settled_status(accepted: Payment, call: Call[ChargeResult]) -> str | None:
    """The terminal status the call's answer proves for the payment as accepted, or None where
    the reference path must decide (pending, no answer, a refusal, a result for another amount)."""
    settled = _settled(accepted, call)
    return None if settled is None else settled[0]


def _settled(accepted: Payment, call: Call[ChargeResult]) -> tuple[str, Decision] | None:
    """`settled_status`'s target with the decision that proves it (`lifecycle.decide`'s, made once)."""
    evidence = call.evidence
    if accepted.status != states.PROCESSING or evidence.kind != "result":
        return None
    assert isinstance(evidence.result, ChargeResult), evidence
    decision = lifecycle.decide(accepted.status, evidence)
    if len(decision.path) != 1:
        return None
    target = decision.path[0]
    # An authorization (ADR 0029) is authorized or failed; an automatic payment ends.
    targets = (states.REQUIRES_CAPTURE, states.FAILED) if accepted.is_manual else states.TERMINAL
    if target not in targets or (target in states.TERMINAL and not decision.values.keys() <= TERMINAL_VALUES):
        return None
    if not MACHINE.matches(accepted, evidence.result):
        return None  # never applied: the reference path records the call and changes nothing
    assert MACHINE.allowed(accepted.status, target)
    return target, decision


def plan_settle(
    accepted: Payment,
    call: Call[ChargeResult],
    *,
    history: tuple[HistoryEntry, ...],
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
) -> Plan | None:
    """Every row of the settle phase and its answer, or None for the reference path."""
    settled = _settled(accepted, call)
    if settled is None or now_us <= accepted.updated_at_us:
        return None  # a clock behind the payment's last change: `Machine.changes` would move it on
    target, decision = settled
    move, changed = plan_move(
        accepted, target, decision, cause=CAUSE, actor=actor, now_us=now_us, new_ids=new_ids, context=context
    )
    call_event = calls.event_row(
        accepted.tenant_id,
        object_type=MACHINE.object_type,
        object_id=accepted.id,
        call=call,
        attempt=None,
        actor=actor,
        now_us=now_us,
        event_id=new_ids.call_event_id,
        context=context,
    )
    plan = Plan(
        **vars(move),  # the move's fields (a frozen dataclass's attributes are its fields)
        call_event=call_event,
        answer=creation_outcome(move.payment, (*history, history_entry(move.state_event))),
        answer_key=accepted.idempotency_key,
    )
    _check_plan(plan, changed)
    return plan


def _check_plan(plan: Plan, changed: set[str]) -> None:
    """Pair assertions: the settle's own (from `processing` to what the call proved, the hold
    kept only by an authorization, posted whole or not at all), then `check_moves`."""
    moved = plan.payment
    assert (plan.hold == KEEP) == (moved.status == states.REQUIRES_CAPTURE) and moved.status not in states.UNRESOLVED
    if plan.hold == KEEP:
        check_authorized(plan)
    else:
        assert plan.clearing.delta.debits_posted_minor in (0, plan.accepted.amount_minor), "posted whole or voided"
    assert plan.answer_key == plan.accepted.idempotency_key, "the creating request's answer"
    check_moves(plan, changed)


def check_moves(plan: Plan, changed: set[str]) -> None:
    """Pair assertions of a move from `processing` with its call: `check_move`, and the call's
    event at the time of the move."""
    assert plan.expected_status == states.PROCESSING
    check_move(plan, changed)
    assert plan.payment.updated_at_us == plan.call_event["created_at_us"]
    assert plan.call_event["kind"] == "processor_call" and "snapshot" not in plan.call_event
