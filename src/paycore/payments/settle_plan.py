"""A payment's second phase, *settle*, planned (ADR 0026 step 3): pure functions from what the
first phase wrote and what the processor answered to every row the phase writes.

In: the payment as the accept phase wrote it (`processing`, its hold's transfer id), the call
to the processor (`lifecycle.calls.Call`: its evidence and what the audit log records of it),
the state changes the accept phase wrote (`accepted_history`: the answer's history is built
from them, never read back), the actor, the clock, the new ids and the audit context (request
and worker ids). Out: a `Plan` of every row: the call's audit event, the compare-and-set of the
payment (expected `processing`; the target decided by `lifecycle.decide`, the one transition
table's, and the columns by `Machine.changes`, the one home of what a move writes), the hold's
resolution (posted on success, voided on failure) with its entries and each account's deltas,
the state event with its snapshot, and the key's answer. No I/O here: the writers
(`settle_repository.py`) only send the plan.

A plan exists only for the common case: the processor answered `succeeded` or `failed` for the
payment as sent, or, for an authorization (`capture: "manual"`, ADR 0029), `requires_capture`
(the compare-and-set writes the authorization's amounts and lifetime, the hold stays pending:
no ledger row) or `failed`. Anything else (pending, no answer, a refusal, a mismatch) has no plan, and the
reference path (`service.create_payment`'s `finish`) decides, as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.idempotency.service import Outcome
from paycore.ledger import chart
from paycore.ledger.limits import Totals
from paycore.lifecycle import calls, recording
from paycore.lifecycle.calls import Call
from paycore.lifecycle.evidence import Decision
from paycore.lifecycle.machine import replaced
from paycore.payments import accept_plan, lifecycle, states
from paycore.payments.schemas import creation_outcome
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

MACHINE: Final = lifecycle.MACHINE
CAUSE: Final = "processor_answer"  # the cause of the change the request's own call proves
# The payment's columns the compare-and-set writes, each from the planned payment: every
# column a move to a terminal state changes (`Machine.changes`, asserted by `_check_plan`).
WRITTEN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "processor_reference",
    "failure_code",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    # An authorization's (`lifecycle.authorization_values`): None for an automatic payment.
    "amount_capturable_minor",
    "amount_captured_minor",
    "authorization_expires_at_us",
    "cancellation_reason",
)
# A worker round's move writes its schedule with it (`in_doubt.plane`): the round's `attempts`
# too. Not every settle's: the creating request's settle writes the payment as its accept phase
# wrote it, and a round may have counted an attempt since.
ROUND_COLUMNS: Final = (*WRITTEN_COLUMNS, "attempts")
# What a terminal move's decision may carry: an authorization's figures go to `requires_capture`
# only, but a declined authorization keeps the lifetime the processor's decline names.
TERMINAL_VALUES: Final = frozenset({"processor_reference", "failure_code", "authorization_expires_at_us"})
AUTOMATIC_VALUES: Final = frozenset({"processor_reference", "failure_code"})  # an automatic payment's
# The hold at this phase: posted (succeeded), voided (failed), or kept pending (requires_capture).
POST: Final = "post"
VOID: Final = "void"
KEEP: Final = "keep"


@dataclass(frozen=True)
class NewIds:
    call_event_id: str
    state_event_id: str
    resolution_id: str
    debit_entry_id: str  # the processor clearing account's entry (posted only)
    credit_entry_id: str  # the destination account's entry (posted only)


@dataclass(frozen=True)
class HistoryEntry:
    """A state change written before this phase, as the answer's history shows it."""

    kind: str
    from_state: str | None
    to_state: str | None
    cause: str
    actor: str
    created_at_us: int


@dataclass(frozen=True)
class AccountMove:
    """What the phase adds to one account: its four totals and its number of entries."""

    delta: Totals
    entries_added: int


@dataclass(frozen=True)
class PlannedEntry:
    id: str
    direction: str
    amount_minor: int


@dataclass(frozen=True)
class Move:
    """A payment's move out of `processing` or `in_doubt` to what the processor proved: the
    compare-and-set, the hold's resolution and the state event. What every settle writes: the
    creating request's and a capture's (`Plan`, with their call and answer), and a webhook's
    (`inbound/apply_plan.py`, with the stored event)."""

    accepted: Payment  # as read (or as the accept phase wrote it): what the compare-and-set expects
    payment: Payment  # as the compare-and-set leaves it
    expected_status: str
    hold: str  # POST (succeeded), VOID (failed) or KEEP (requires_capture: the authorization stays open)
    state_event: dict[str, Any]  # the state change's row (`lifecycle.recording.event_row`)
    resolution_id: str
    clearing_code: str  # the processor clearing account's code: the hold's debited account
    clearing: AccountMove
    destination: AccountMove
    entries: tuple[PlannedEntry, ...]  # (clearing debit, destination credit) when posted; none when voided

    @property
    def post(self) -> bool:
        return self.hold == POST

    @property
    def resolution_kind(self) -> str:
        assert self.hold != KEEP, "an open authorization's hold is not resolved"
        return self.hold


@dataclass(frozen=True)
class Plan(Move):
    call_event: dict[str, Any]  # the call's audit row (`lifecycle.calls.event_row`)
    answer: Outcome
    answer_key: str  # whose answer: the creating request's key here, a capture's its own (capture_plan.py)


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


def plan_move(
    accepted: Payment,
    target: str,
    decision: Decision,
    *,
    cause: str,
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
    values: Mapping[str, Any] | None = None,
) -> tuple[Move, set[str]]:
    """The move of `accepted` to `target` as `decision` (`lifecycle.decide`'s) says, and the
    columns it changes: the one home of a settle's compare-and-set, hold and state event.
    `values`: further columns written with the move, as `Machine.apply_evidence` writes them (a
    worker round's schedule: `in_doubt.plane`)."""
    assert MACHINE.allowed(accepted.status, target) and now_us > accepted.updated_at_us, (accepted, target)
    changes = MACHINE.changes(accepted, target, now_us, {**decision.values, **(values or {})})
    moved = replaced(accepted, changes)
    state_event = recording.event_row(
        MACHINE,
        moved,
        accepted.status,
        cause=cause,
        actor=actor,
        now_us=moved.updated_at_us,
        data=decision.data,
        event_id=new_ids.state_event_id,
        context=context,
    )
    hold = POST if target == states.SUCCEEDED else VOID if target in states.TERMINAL else KEEP
    clearing, destination, entries = _hold_resolved(accepted.amount_minor, hold, new_ids)
    move = Move(
        accepted=accepted,
        payment=moved,
        expected_status=accepted.status,
        hold=hold,
        state_event=state_event,
        resolution_id=new_ids.resolution_id,
        clearing_code=clearing_code(accepted.currency),
        clearing=clearing,
        destination=destination,
        entries=entries,
    )
    return move, set(changes)


def terminal_status(payment: Payment, decision: Decision) -> str | None:
    """The terminal status `decision` (a result's, the same from `processing` and `in_doubt`)
    moves `payment` to where a settle's move takes it without the payment's call or answer (a
    webhook's, a worker round's): an automatic payment waiting for the processor's word, nothing
    else in flight, one step to `succeeded` or `failed`; None for the reference path. The amount
    and currency are the caller's to check (`Machine.matches`)."""
    if payment.status not in states.UNRESOLVED or payment.is_manual or payment.operation is not None:
        return None
    if len(decision.path) != 1 or not decision.values.keys() <= AUTOMATIC_VALUES:
        return None
    target = decision.path[0]
    if target not in (states.SUCCEEDED, states.FAILED):
        return None
    assert "processor_reference" in decision.values, decision
    assert ("failure_code" in decision.values) == (target == states.FAILED), decision
    return target


def plan_terminal_move(
    payment: Payment, target: str, decision: Decision, *, columns: tuple[str, ...] = WRITTEN_COLUMNS, **given: Any
) -> Move:
    """The settle's move (`plan_move`, its cause, actor, clock, new ids, context and values as
    the caller gives them) to `terminal_status`'s target, checked (`check_move`, against the
    `columns` its write sends): from `processing` or `in_doubt`, the hold posted or voided,
    nothing left in flight."""
    move, changed = plan_move(payment, target, decision, **given)
    check_move(move, changed, columns=columns)
    assert move.payment.status in states.TERMINAL and move.expected_status in states.UNRESOLVED, move.payment
    assert move.hold in (POST, VOID) and move.payment.operation is None
    return move


def clearing_code(currency: str) -> str:
    """The processor clearing account's code: the hold's debited account."""
    return chart.processor_clearing(currency)


def _hold_resolved(
    held_minor: int, hold: str, new_ids: NewIds
) -> tuple[AccountMove, AccountMove, tuple[PlannedEntry, ...]]:
    """The hold posted in full, voided, or kept (nothing moves)."""
    if hold == KEEP:
        return AccountMove(Totals(0, 0, 0, 0), 0), AccountMove(Totals(0, 0, 0, 0), 0), ()
    return hold_moved(held_minor, held_minor if hold == POST else 0, new_ids)


def hold_moved(
    held_minor: int, posted_minor: int, new_ids: NewIds
) -> tuple[AccountMove, AccountMove, tuple[PlannedEntry, ...]]:
    """The hold (processor clearing debited, destination credited, `held_minor` each) resolved:
    each account's pending figure released, and `posted_minor` of it (0: voided; less than held:
    a partial capture, the rest released in the same step) added to its posted figure by one
    entry."""
    assert 0 <= posted_minor <= held_minor
    post = posted_minor > 0
    added = 1 if post else 0
    entries = (
        (
            PlannedEntry(new_ids.debit_entry_id, "debit", posted_minor),
            PlannedEntry(new_ids.credit_entry_id, "credit", posted_minor),
        )
        if post
        else ()
    )
    clearing = AccountMove(Totals(posted_minor, 0, -held_minor, 0), added)
    destination = AccountMove(Totals(0, posted_minor, 0, -held_minor), added)
    return clearing, destination, entries


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


def check_authorized(move: Move) -> None:
    """Pair assertions of an authorization's move: its figures and lifetime written, nothing
    due, the hold kept pending (no ledger row)."""
    moved = move.payment
    assert move.hold == KEEP and moved.status == states.REQUIRES_CAPTURE
    assert moved.is_manual and moved.amount_captured_minor == 0, moved
    assert moved.amount_capturable_minor is not None and 0 < moved.amount_capturable_minor <= moved.amount_minor
    assert moved.authorization_expires_at_us is not None and moved.next_attempt_at_us is None
    assert move.clearing.delta == move.destination.delta == Totals(0, 0, 0, 0) and not move.entries, "kept"


def check_moves(plan: Plan, changed: set[str]) -> None:
    """Pair assertions of a move from `processing` with its call: `check_move`, and the call's
    event at the time of the move."""
    assert plan.expected_status == states.PROCESSING
    check_move(plan, changed)
    assert plan.payment.updated_at_us == plan.call_event["created_at_us"]
    assert plan.call_event["kind"] == "processor_call" and "snapshot" not in plan.call_event


def check_move(plan: Move, changed: set[str], *, columns: tuple[str, ...] = WRITTEN_COLUMNS) -> None:
    """Pair assertions of a move out of `processing` or `in_doubt`: the compare-and-set writes
    what the machine decided; the hold is resolved whole (posted + returned = held, on each
    side) or kept; the entries sum to zero and are the posted figures; the state event is the
    one history entry this phase adds."""
    accepted, moved = plan.accepted, plan.payment
    assert changed <= set(columns), changed - set(columns)
    assert plan.expected_status in states.UNRESOLVED
    assert plan.post == (moved.status == states.SUCCEEDED)
    assert moved.updated_at_us == plan.state_event["created_at_us"]
    assert (moved.id, moved.amount_minor, moved.transfer_id) == (
        accepted.id,
        accepted.amount_minor,
        accepted.transfer_id,
    )
    clearing, destination = plan.clearing.delta, plan.destination.delta
    held = 0 if plan.hold == KEEP else accepted.amount_minor
    posted = clearing.debits_posted_minor
    returned = held - posted
    assert posted + returned == held and 0 <= posted <= held and (posted == 0) == (plan.hold != POST)
    assert (clearing.debits_pending_minor, destination.credits_pending_minor) == (-held, -held)
    assert destination.credits_posted_minor == posted and clearing.credits_posted_minor == 0
    debits = sum(entry.amount_minor for entry in plan.entries if entry.direction == "debit")
    credits = sum(entry.amount_minor for entry in plan.entries if entry.direction == "credit")
    assert debits - credits == 0, "a transfer's entries sum to zero"
    assert debits == posted and len(plan.entries) == plan.clearing.entries_added + plan.destination.entries_added
    state_event = plan.state_event
    assert (state_event["from_state"], state_event["to_state"]) == (plan.expected_status, moved.status)
    assert "object_sequence" not in state_event, "numbered by its INSERT, after the payment's last"
