"""A payout's move out of `processing` or `in_doubt` on the bank's word, planned for the data plane
(ADR 0026 step 3): pure functions from the payout as read and the machine's decision to every
row the move writes, as the reference path (`lifecycle.MACHINE.apply_evidence`) writes them.

The two moves planned, each one step of the transition table: the bank `accepted` the payout
into a batch (to `sent`: its hold posted, the source debited and the money in transit), or
`rejected` it (to `failed`: its hold voided, nothing left). The columns are `Machine.changes`'s
(the one home of what a move writes: the status, its time, the fault cleared, the bank's
reference and batch, `sent_at_us` or the failure code and the schedule cleared, the in-doubt time
cleared); the hold's resolution is `ledger.hold_repository.Resolution` (its source account
debited, the tenant's in-transit account credited); the state event is
`lifecycle.recording.event_row`'s with its snapshot. The write (`settle_repository.py`) moves the
payout only if it is still as read (its status, time, attempts, bank reference, batch and
failure code: every fact of the snapshot a waiting payout can change).

Anything else (a `settled` or `returned` word, which moves two steps and books the bank's fee or
the return; a payout `sent` already; a mismatch) has no plan: the reference path's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from paycore.audit.rows import EventContext
from paycore.ledger import chart
from paycore.ledger.hold_repository import Resolution
from paycore.lifecycle import recording
from paycore.lifecycle.evidence import Decision
from paycore.lifecycle.machine import replaced
from paycore.payouts import lifecycle, money, states
from paycore.payouts.types import Payout

MACHINE: Final = lifecycle.MACHINE
# The columns a move to `sent` or `failed` may write (`Machine.changes`); each move writes its own.
WRITTEN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "bank_reference",
    "batch_id",
    "failure_code",
    "sent_at_us",
    "in_doubt_since_us",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "attempts",  # a worker round's, written with its move (`in_doubt.plane`)
)
_TARGETS: Final = frozenset({states.SENT, states.FAILED})


@dataclass(frozen=True)
class NewIds:
    resolution_id: str
    debit_entry_id: str  # the source's entry (posted only): the hold's first
    credit_entry_id: str  # the in-transit account's (posted only)
    state_event_id: str


@dataclass(frozen=True)
class Move:
    """A payout's compare-and-set, its hold's resolution, its state event."""

    accepted: Payout  # as read: what the compare-and-set expects
    payout: Payout  # as the compare-and-set leaves it
    changes: dict[str, Any]  # the columns it writes (`Machine.changes`), a part of `WRITTEN_COLUMNS`
    resolution: Resolution  # the hold posted (sent) or voided (failed)
    state_event: dict[str, Any]  # the state change's row (`lifecycle.recording.event_row`)

    @property
    def expected_status(self) -> str:
        return self.accepted.status


class Step(Protocol):
    """What a composed move reads of each of its steps (a `Move` here, a settlement's, a return's)."""

    @property
    def state_event(self) -> dict[str, Any]: ...
    @property
    def payout(self) -> Payout: ...
    @property
    def expected_status(self) -> str: ...


F = TypeVar("F", bound=Step)
S = TypeVar("S", bound=Step)


@dataclass(frozen=True)
class Steps(Generic[F, S]):
    """A payout moved further than one step by one word of the bank's, as the reference path moves
    it (step by step): the first move at the webhook's time, the second after it. The one home of
    a composed move's shape (`settlement_plan.TwoSteps`, `return_plan.ReturnSteps`)."""

    first: F
    second: S

    @property
    def state_event(self) -> dict[str, Any]:
        """The move's first state event, at the webhook's time (`apply_object_plan.check_plan`)."""
        return self.first.state_event

    @property
    def payout(self) -> Payout:
        return self.second.payout

    @property
    def expected_status(self) -> str:
        return self.first.expected_status


def as_read(payout: Payout) -> tuple[Any, ...]:
    """What a compare-and-set of a waiting payout expects, in this order: the facts of its state
    event's snapshot a waiting payout can change (status, time, attempts, bank reference, batch,
    failure code). A settle's and a settlement's, on both databases."""
    return (
        payout.status,
        payout.updated_at_us,
        payout.attempts,
        payout.bank_reference,
        payout.batch_id,
        payout.failure_code,
    )


def step(
    payout: Payout,
    target: str,
    decision: Decision,
    *,
    cause: str,
    actor: str,
    now_us: int,
    event_id: str,
    context: EventContext,
) -> tuple[dict[str, Any], Payout, dict[str, Any]]:
    """One step of the transition table as `decision` says: the columns it writes
    (`Machine.changes`), the payout as it leaves it, and its state event with the snapshot. The
    one home of a payout's step on the data plane (its settle, settlement and return)."""
    assert MACHINE.allowed(payout.status, target), (payout.status, target)
    changes = MACHINE.changes(payout, target, now_us, decision.values)
    moved = replaced(payout, changes)
    state_event = recording.event_row(
        MACHINE,
        moved,
        payout.status,
        cause=cause,
        actor=actor,
        now_us=moved.updated_at_us,
        data=decision.data,
        event_id=event_id,
        context=context,
    )
    return changes, moved, state_event


def settled_status(payout: Payout, decision: Decision) -> str | None:
    """The status `decision` moves `payout` to in one step, `sent` or `failed`, or None where
    the reference path decides."""
    if payout.status not in (states.PROCESSING, states.IN_DOUBT) or len(decision.path) != 1:
        return None
    target = decision.path[0]
    if target not in _TARGETS or not decision.values.keys() <= {"bank_reference", "batch_id", "failure_code"}:
        return None
    assert MACHINE.allowed(payout.status, target)
    return target


def plan_move(
    payout: Payout,
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
    """The move of `payout` (as read) to `target` as `decision` says: the one home of a payout's
    settle on the data plane. `values`: further columns written with the move, as
    `Machine.apply_evidence` writes them (a worker round's schedule: `in_doubt.plane`)."""
    assert settled_status(payout, decision) == target and now_us > payout.updated_at_us, (payout, target)
    if values:  # written with the move, as `Machine.apply_evidence` writes them
        decision = dataclasses.replace(decision, values={**decision.values, **values})
    changes, moved, state_event = step(
        payout,
        target,
        decision,
        cause=cause,
        actor=actor,
        now_us=now_us,
        event_id=new_ids.state_event_id,
        context=context,
    )
    post = target == states.SENT
    resolution = Resolution(
        tenant_id=payout.tenant_id,
        transfer_id=payout.transfer_id,
        owner_id=payout.id,
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        post=post,
        resolution_id=new_ids.resolution_id,
        entry_ids=(new_ids.debit_entry_id, new_ids.credit_entry_id) if post else None,
        debited_id=payout.source_account_id,
        credited_code=chart.code(money.IN_TRANSIT, payout.currency),
        now_us=moved.updated_at_us,
    )
    move = Move(accepted=payout, payout=moved, changes=changes, resolution=resolution, state_event=state_event)
    check_move(move)
    return move


def check_move(move: Move) -> None:
    """Pair assertions: one step out of `processing` or `in_doubt`; the hold posted exactly when
    the payout is sent, voided when it failed; the columns written are the move's; the state
    event is the move's, at its time."""
    accepted, moved, changes = move.accepted, move.payout, move.changes
    assert accepted.status in (states.PROCESSING, states.IN_DOUBT) and moved.status in _TARGETS
    assert move.resolution.post == (moved.status == states.SENT)
    assert (moved.id, moved.amount_minor, moved.transfer_id) == (
        accepted.id,
        accepted.amount_minor,
        accepted.transfer_id,
    )
    assert changes.keys() <= set(WRITTEN_COLUMNS), changes.keys() - set(WRITTEN_COLUMNS)
    assert changes["updated_at_us"] == moved.updated_at_us == move.resolution.now_us
    assert ("sent_at_us" in changes) == move.resolution.post and ("failure_code" in changes) != move.resolution.post
    assert changes["in_doubt_since_us"] is None, "a payout the bank answered is in doubt no more"
    state_event = move.state_event
    assert (state_event["from_state"], state_event["to_state"]) == (accepted.status, moved.status)
    assert state_event["created_at_us"] == moved.updated_at_us and "object_sequence" not in state_event
