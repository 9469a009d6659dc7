"""The processor's webhook that settles a refund, on the data plane (ADR 0026 step 3): the data of
the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
refund.

The case: a refund event saying `succeeded` or `failed` for a refund still `processing` (the
processor answered `pending`) or `in_doubt` (its answer was lost), with a hold, of the event's
amount and currency. The move is the refund's settle (`refunds.settle_plan.plan_move`, the
compare-and-set, the ceiling's release on a failure, the hold posted or voided, the state
event), written by `refunds.settle_repository.write_move` on SQLite and by migration
`*_inbound_refunds.py`'s `paycore_inbound_apply_refund` (around `paycore_refunds_settle`) on
PostgreSQL.

The plain case: the refund already in the status the event proves, of its amount and currency
(the processor's synchronous answer settled it first; or a redelivery). The reference path finds
no move allowed from a terminal status and records `stale` (`paycore_inbound_confirm_refund`).
A refund in another status is a contradiction (`conflict`): the reference path's.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.in_doubt.plane import hold_resolution_ids
from paycore.inbound import apply_object_repository, events
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Confirmation, Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.receive_plan import STALE
from paycore.inbound.schemas import ProcessorEvent
from paycore.processor.port import RefundResult
from paycore.refunds import service as refunds
from paycore.refunds import settle_plan, settle_repository, states
from paycore.refunds.settle_plan import Move
from paycore.refunds.types import Refund

# The statuses a refund event proves that the data plane writes; `pending` changes nothing.
FINAL_STATUSES: Final = ("succeeded", "failed")


def is_final(event: ProcessorEvent) -> bool:
    """A refund event that may settle its refund: the data plane's to try."""
    return event.data.object == "refund" and event.data.status in FINAL_STATUSES


def refund_result(event: ProcessorEvent) -> RefundResult:
    """The refund the event describes, as the reference path reads it."""
    return events.refund_result(event.data)


def confirmed_cause(event: ProcessorEvent, refund: Refund) -> str | None:
    """`stale` for a refund already in the status the event proves, of its amount and currency;
    None for everything else (a mismatch: the reference path records it)."""
    if refund.status != event.data.status or not refunds.MACHINE.matches(refund, refund_result(event)):
        return None
    assert refund.status in states.TERMINAL and not refunds.MACHINE.allowed(refund.status, refund.status)
    return STALE


def _apply_params(plan: Plan[Move]) -> tuple[Any, ...]:
    webhook, move = plan.webhook, plan.move
    moved = move.refund
    assert (moved.fault_code, moved.faulted_at_us, moved.next_attempt_at_us, moved.claimed_by) == (None,) * 4
    assert moved.claimed_until_us is None, "the function clears the schedule, as `Machine.changes` does"
    return (
        *stored_event_params(webhook),
        *settle_repository.move_params(move),
        *events_params(plan),
    )


def _confirm_params(confirmation: Confirmation[Refund]) -> tuple[Any, ...]:
    webhook, refund, audit_event = confirmation.webhook, confirmation.item, confirmation.audit_event
    return (
        *stored_event_params(webhook),
        webhook["created_at_us"],
        refund.id,
        refund.status,
        refund.amount_minor,
        refund.currency,
        audit_event["id"],
        audit_event["type"],
        audit_event["actor"],
        audit_event["data"],
        webhook["status"],
    )


REFUND: Final = ObjectApply(
    Planning(
        machine=refunds.MACHINE,
        takes=is_final,
        result_of=refund_result,
        settled_status=settle_plan.settled_status,
        plan_move=settle_plan.plan_move,
        new_ids=hold_resolution_ids(settle_plan.NewIds),
        moved=lambda move: move.refund,
        confirmed_cause=confirmed_cause,
    ),
    Writing(
        write_move=settle_repository.write_move,
        apply_call=apply_object_repository.APPLY_REFUND,
        apply_params=_apply_params,
        confirm_call=apply_object_repository.CONFIRM_REFUND,
        confirm_params=_confirm_params,
    ),
)
