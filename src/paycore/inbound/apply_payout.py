"""The bank's webhook that moves a payout one step, on the data plane (ADR 0026 step 3): the data
of the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payout.

The case: a payout event saying `accepted` (to `sent`: the hold posted) or `rejected` (to
`failed`: the hold voided) for a payout still `processing` or `in_doubt` (the bank's answer to
the send was lost), of the event's amount, currency and rail. The move is the payout's settle
(`payouts.settle_plan.plan_move`: the compare-and-set, the hold posted or voided, the state
event), written by `payouts.settle_repository.write_move` on SQLite and by migration
`*_inbound_payouts.py`'s `paycore_inbound_apply_payout` (around `paycore_payouts_settle`) on
PostgreSQL.

The plain case: the bank's synchronous answer having moved the payout to `sent` first, its
`accepted` webhook only confirms (or comes after the settlement, or is a redelivery). The
reference path finds nothing to do (`no_change`, no contradiction: an `accepted` contradicts only
a `failed` payout) and records the audit event with the cause `no_change`
(`paycore_inbound_confirm_payout`). So for a rejection's redelivery, the bank's `rejected` for a
payout `failed` already, of its amount, currency and rail: the reference path finds it `stale`
(a terminal payout; no contradiction: a `rejected` contradicts only a paid payout) and records
the audit event with the cause `stale`, by the same function. A `settled` word is
`apply_payout_settlement.py`'s, a `returned` word `apply_payout_return.py`'s; a payout in any
other status and a mismatch are the reference path's.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.in_doubt.plane import hold_resolution_ids
from paycore.inbound import apply_object_repository, service
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Confirmation, Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.schemas import ProcessorEvent
from paycore.lifecycle.evidence import Evidence
from paycore.payouts import service as payouts
from paycore.payouts import settle_plan, settle_repository, states
from paycore.payouts.return_plan import LATE
from paycore.payouts.settle_plan import Move
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult
from paycore.reconciliation.matching import contradicts

# The bank's words the data plane writes: each moves a waiting payout one step.
ONE_STEP_STATUSES: Final = ("accepted", "rejected")
# The statuses in which an `accepted` changes nothing (`lifecycle.decide`: `already`).
CONFIRMED_STATUSES: Final = (states.SENT, states.SETTLED, states.RETURNED)
NO_CHANGE: Final = "no_change"  # the audit event's cause, as `service._apply_payout` records it
STALE: Final = "stale"  # ... for a `rejected` that finds the payout `failed` already (`Machine.apply_evidence`)
# The statuses the confirm function locks the payout in, by the plain case's audit cause (`late`:
# a return past its window, `apply_payout_return.py`'s).
_STATUSES_OF: Final = {NO_CHANGE: CONFIRMED_STATUSES, STALE: (states.FAILED,), LATE: (states.SETTLED,)}


def is_one_step(event: ProcessorEvent) -> bool:
    """A payout event that may move its payout one step: the data plane's to try."""
    data = event.data
    return data.object == "payout" and data.status in ONE_STEP_STATUSES and data.rail is not None


def payout_result(event: ProcessorEvent) -> PayoutResult:
    """The payout the event describes, as the reference path reads it."""
    return service.payout_result(event.data)


def confirmed_cause(event: ProcessorEvent, payout: Payout) -> str | None:
    """`no_change` where the bank's `accepted` finds `payout` sent already; `stale` where its
    `rejected` (of the payout's amount, currency and rail) finds it failed already; None for
    everything else."""
    word, result = event.data.status, payout_result(event)
    if word == "accepted" and payout.status in CONFIRMED_STATUSES:
        assert not payouts.MACHINE.decide(payout.status, Evidence.of_result(result)).path
        return NO_CHANGE
    if word != "rejected" or payout.status != states.FAILED or not payouts.MACHINE.matches(payout, result):
        return None  # a mismatch is recorded as one: the reference path's
    # `Machine.apply_evidence`: a move to where the terminal payout is, not allowed: `stale`; and
    # `service._apply_payout` opens no break, since a rejection contradicts only a paid payout.
    decision = payouts.MACHINE.decide(payout.status, Evidence.of_result(result))
    assert decision.path == (states.FAILED,) and not payouts.MACHINE.allowed(payout.status, states.FAILED)
    assert payout.status in states.TERMINAL and not contradicts("payout", states.FAILED, word)
    return STALE


def _apply_params(plan: Plan[Move]) -> tuple[Any, ...]:
    webhook, move = plan.webhook, plan.move
    moved, resolution = move.payout, move.resolution
    # The function writes what `Machine.changes` writes for each target (`settle_plan.check_move`).
    assert (moved.fault_code, moved.faulted_at_us, moved.in_doubt_since_us) == (None, None, None), moved
    assert resolution.post or (moved.next_attempt_at_us, moved.claimed_by, moved.claimed_until_us) == (None,) * 3
    assert not resolution.post or moved.sent_at_us == moved.updated_at_us
    return (
        *stored_event_params(webhook),
        *settle_repository.move_params(move),
        *events_params(plan),
    )


def confirm_params(confirmation: Confirmation[Payout]) -> tuple[Any, ...]:
    """`paycore_inbound_confirm_payout`'s arguments: the payout locked in the statuses its
    plain case's cause names."""
    webhook, payout, audit_event = confirmation.webhook, confirmation.item, confirmation.audit_event
    return (
        *stored_event_params(webhook),
        webhook["created_at_us"],
        webhook["status"],
        payout.id,
        list(_STATUSES_OF[audit_event["cause"]]),
        audit_event["id"],
        audit_event["type"],
        audit_event["actor"],
        audit_event["data"],
        audit_event["cause"],
    )


PAYOUT: Final = ObjectApply(
    Planning(
        machine=payouts.MACHINE,
        takes=is_one_step,
        result_of=payout_result,
        settled_status=settle_plan.settled_status,
        plan_move=settle_plan.plan_move,
        new_ids=hold_resolution_ids(settle_plan.NewIds),  # the source's entry, then the in-transit account's
        moved=lambda move: move.payout,
        confirmed_cause=confirmed_cause,
    ),
    Writing(
        write_move=settle_repository.write_move,
        apply_call=apply_object_repository.APPLY_PAYOUT,
        apply_params=_apply_params,
        confirm_call=apply_object_repository.CONFIRM_PAYOUT,
        confirm_params=confirm_params,
    ),
)
