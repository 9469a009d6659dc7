"""A payment's move out of `processing` or `in_doubt`, planned (ADR 0026 step 3): pure
functions from the payment as read, the status the processor's word proves and the machine's
decision to the move's rows (`settle_types.Move`). The one home of a settle's compare-and-set
(the columns by `Machine.changes`, the one home of what a move writes), its hold's resolution
(posted, voided, or kept pending by an authorization) and its state event (`plan_move`), and of
their pair assertions (`check_move`, `check_authorized`).

Shared by every phase that moves a payment on the processor's word: the creating request's
settle (`settle_plan.py`, with the call and the answer), a capture's or cancel's finish
(`capture_plan.py`: the hold by `hold_moved`), the processor's webhook (`inbound/apply_payment.py`)
and a worker round (`settle.py`'s `ROUND`), the last two without the payment's call or answer
(`terminal_status`, `plan_terminal_move`). No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.ledger import chart
from paycore.ledger.limits import Totals
from paycore.lifecycle import recording
from paycore.lifecycle.evidence import Decision
from paycore.lifecycle.machine import replaced
from paycore.payments import lifecycle, states
from paycore.payments.settle_types import KEEP, POST, VOID, WRITTEN_COLUMNS, AccountMove, Move, NewIds, PlannedEntry
from paycore.payments.types import Payment

MACHINE: Final = lifecycle.MACHINE
# What a move without the payment's call (a webhook's, a worker round's) may carry: an automatic
# payment's reference, and its failure code when declined.
AUTOMATIC_VALUES: Final = frozenset({"processor_reference", "failure_code"})


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


def check_authorized(move: Move) -> None:
    """Pair assertions of an authorization's move: its figures and lifetime written, nothing
    due, the hold kept pending (no ledger row)."""
    moved = move.payment
    assert move.hold == KEEP and moved.status == states.REQUIRES_CAPTURE
    assert moved.is_manual and moved.amount_captured_minor == 0, moved
    assert moved.amount_capturable_minor is not None and 0 < moved.amount_capturable_minor <= moved.amount_minor
    assert moved.authorization_expires_at_us is not None and moved.next_attempt_at_us is None
    assert move.clearing.delta == move.destination.delta == Totals(0, 0, 0, 0) and not move.entries, "kept"


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
