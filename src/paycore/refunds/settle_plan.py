"""A refund's move out of `processing` or `in_doubt` to what the processor proved, planned for the
data plane (ADR 0026 step 3): pure functions from the refund as read and the machine's decision
to every row the move writes, as the reference path (`lifecycle.MACHINE.apply_evidence`) writes
them.

The reference path's move: the compare-and-set of the refund (`Machine.changes`, the one home of
what a move writes), then its effect (`lifecycle._effect`): on failure the ceiling's release (the
refund's amount given back to its payment's `refunded_minor`), and the hold (a pending transfer:
the account the payment credited debited, the processor clearing account credited) posted on
success or voided on failure; then the state event with its snapshot. The plan holds those: the
refund as the compare-and-set leaves it, the amount released, the hold's resolution with its
entries (posted only) and each side's deltas, the state event. The write (`settle_repository.py`)
checks under its locks what the plan assumed (the refund as read, the hold pending and the
refund's) and finds the hold's accounts by its entries.

A plan exists only for a move to `succeeded` or `failed` of a refund with a hold; the rest is the
reference path's. Its first caller is the processor's webhook (`inbound/apply_refund.py`, in the
shape of `inbound/apply_object.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.ledger import chart
from paycore.ledger.limits import Totals
from paycore.lifecycle import recording
from paycore.lifecycle.evidence import Decision
from paycore.lifecycle.machine import replaced
from paycore.refunds import lifecycle, states
from paycore.refunds.types import Refund

MACHINE: Final = lifecycle.MACHINE
# The refund's columns a move to a terminal status writes (`Machine.changes`: the status, its
# time, the fault and the schedule cleared, the processor's reference and failure code).
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
    "attempts",  # a worker round's, written with its move (`in_doubt.plane`)
)
# What a terminal move's decision may carry (`lifecycle.decide`).
_TERMINAL_VALUES: Final = frozenset({"processor_reference", "failure_code"})


@dataclass(frozen=True)
class NewIds:
    resolution_id: str
    debit_entry_id: str  # the destination's entry (posted only): the hold's first
    credit_entry_id: str  # the processor clearing account's (posted only)
    state_event_id: str


@dataclass(frozen=True)
class PlannedEntry:
    id: str
    direction: str
    amount_minor: int


@dataclass(frozen=True)
class Move:
    """A refund's compare-and-set, its ceiling's release, its hold's resolution, its state event."""

    accepted: Refund  # as read: what the compare-and-set expects, column for column
    refund: Refund  # as the compare-and-set leaves it
    released_minor: int  # given back to the payment's `refunded_minor` (a failure: the whole amount)
    post: bool  # the hold posted (succeeded) or voided (failed)
    resolution_id: str
    clearing_code: str  # the processor clearing account's code: the hold's credited account
    destination_delta: Totals  # the account the payment credited: the hold's debit side
    clearing_delta: Totals
    entries: tuple[PlannedEntry, ...]  # (destination debit, clearing credit) when posted; none when voided
    state_event: dict[str, Any]  # the state change's row (`lifecycle.recording.event_row`)

    @property
    def expected_status(self) -> str:
        return self.accepted.status

    @property
    def resolution_kind(self) -> str:
        return "post" if self.post else "void"


def settled_status(refund: Refund, decision: Decision) -> str | None:
    """The terminal status `decision` moves `refund` to, or None where the reference path decides."""
    if refund.status not in states.UNRESOLVED or refund.transfer_id is None or len(decision.path) != 1:
        return None
    target = decision.path[0]
    if target not in (states.SUCCEEDED, states.FAILED) or not decision.values.keys() <= _TERMINAL_VALUES:
        return None
    assert MACHINE.allowed(refund.status, target)
    return target


def plan_move(
    refund: Refund,
    target: str,
    decision: Decision,
    *,
    cause: str,
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
    values: Mapping[str, Any] | None = None,
) -> Move:
    """The move of `refund` (as read) to `target` as `decision` says: the one home of a refund's
    settle on the data plane. `values`: further columns written with the move, as
    `Machine.apply_evidence` writes them (a worker round's schedule: `in_doubt.plane`)."""
    assert settled_status(refund, decision) == target and now_us > refund.updated_at_us, (refund, target)
    changes = MACHINE.changes(refund, target, now_us, {**decision.values, **(values or {})})
    assert changes.keys() <= set(WRITTEN_COLUMNS), changes.keys() - set(WRITTEN_COLUMNS)
    moved = replaced(refund, changes)
    state_event = recording.event_row(
        MACHINE,
        moved,
        refund.status,
        cause=cause,
        actor=actor,
        now_us=moved.updated_at_us,
        data=decision.data,
        event_id=new_ids.state_event_id,
        context=context,
    )
    post, amount = target == states.SUCCEEDED, refund.amount_minor
    posted = amount if post else 0
    entries = (
        (
            PlannedEntry(new_ids.debit_entry_id, "debit", amount),
            PlannedEntry(new_ids.credit_entry_id, "credit", amount),
        )
        if post
        else ()
    )
    move = Move(
        accepted=refund,
        refund=moved,
        released_minor=amount if target in states.RELEASED else 0,
        post=post,
        resolution_id=new_ids.resolution_id,
        clearing_code=chart.processor_clearing(refund.currency),
        destination_delta=Totals(posted, 0, -amount, 0),
        clearing_delta=Totals(0, posted, 0, -amount),
        entries=entries,
        state_event=state_event,
    )
    check_move(move)
    return move


def check_move(move: Move) -> None:
    """Pair assertions: a terminal move from `processing` or `in_doubt`; the ceiling released
    exactly when the refund failed; the hold released whole on each side and posted whole or not
    at all; the entries sum to zero; the state event is the move's, at its time."""
    accepted, moved = move.accepted, move.refund
    assert accepted.status in states.UNRESOLVED and moved.status in (states.SUCCEEDED, states.FAILED)
    assert move.post == (moved.status == states.SUCCEEDED)
    assert move.released_minor == (0 if move.post else accepted.amount_minor)
    assert (moved.id, moved.amount_minor, moved.transfer_id, moved.payment_id) == (
        accepted.id,
        accepted.amount_minor,
        accepted.transfer_id,
        accepted.payment_id,
    )
    held, posted = accepted.amount_minor, move.destination_delta.debits_posted_minor
    assert posted in (0, held) and (posted == held) == move.post
    assert (move.destination_delta.debits_pending_minor, move.clearing_delta.credits_pending_minor) == (-held, -held)
    assert move.clearing_delta.credits_posted_minor == posted
    debits = sum(entry.amount_minor for entry in move.entries if entry.direction == "debit")
    credits = sum(entry.amount_minor for entry in move.entries if entry.direction == "credit")
    assert debits == credits == posted, "a transfer's entries sum to zero, and are what is posted"
    state_event = move.state_event
    assert (state_event["from_state"], state_event["to_state"]) == (accepted.status, moved.status)
    assert state_event["created_at_us"] == moved.updated_at_us and "object_sequence" not in state_event
