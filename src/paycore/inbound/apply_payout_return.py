"""The bank's webhook that returns a settled payout, on the data plane (ADR 0026 step 3): the data
of the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payout's return.

The case: a payout event saying `returned` for a payout `settled` (the bank paid the beneficiary,
whose bank sent it back), of the event's amount, currency and rail, inside the return's window.
The move is `payouts.return_plan.plan_move` (the compare-and-set, the state event, the return's
and the return fee's transfers and adjustments with their audit events), written by
`payouts.return_repository.write_move` on SQLite and by migration `*_inbound_payout_return.py`'s
`paycore_inbound_return_payout` on PostgreSQL.

No plain case: a return past its window (the reference path records the refusal), a payout
returned already or a redelivery, a payout in any other status (two or three steps) and a
mismatch are the reference path's.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.inbound import apply_object_repository
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.apply_payout import payout_result
from paycore.inbound.apply_payout_settlement import postings_params
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.payouts import return_plan, return_repository, settle_plan
from paycore.payouts import service as payouts
from paycore.payouts.return_plan import Move, NewIds
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult


def is_return(event: ProcessorEvent) -> bool:
    """A payout event that may return its payout: the data plane's to try."""
    data = event.data
    return data.object == "payout" and data.status == "returned" and data.rail is not None


def _no_confirmation(event: ProcessorEvent, payout: Payout) -> str | None:
    return None


def _return_facts(result: PayoutResult) -> dict[str, Any]:
    return {
        "return_code": result.return_code,
        "return_amount_minor": result.return_amount_minor,
        "return_fee_minor": result.return_fee_minor,
        "returned_at_us": result.returned_at_us,
    }


def _new_ids() -> NewIds:
    # In the reference path's order (the state event; `adjustments.record`'s adjustment, its
    # transfer and entries, its audit event, for the return and then its fee; the webhook's audit
    # event after them): ids made in one process increase.
    state_event_id = ids.new_id("evt")
    return_adjustment_id, return_transfer_id = ids.new_id("adj"), ids.new_id("txn")
    return_entry_ids = (ids.new_id("ent"), ids.new_id("ent"), ids.new_id("ent"))
    return_ids = (return_adjustment_id, return_transfer_id, ids.new_id("evt"))
    fee_adjustment_id, fee_transfer_id = ids.new_id("adj"), ids.new_id("txn")
    fee_entry_ids = (ids.new_id("ent"), ids.new_id("ent"))
    return NewIds(
        state_event_id=state_event_id,
        return_ids=return_ids,
        return_entry_ids=return_entry_ids,
        fee_ids=(fee_adjustment_id, fee_transfer_id, ids.new_id("evt")),
        fee_entry_ids=fee_entry_ids,
    )


def _apply_params(plan: Plan[Move]) -> tuple[Any, ...]:
    move = plan.move
    accepted, moved = move.accepted, move.payout
    assert moved.updated_at_us == moved.returned_at_us == plan.webhook["created_at_us"]
    return (
        *stored_event_params(plan.webhook),
        accepted.id,
        *settle_plan.as_read(accepted),
        moved.updated_at_us,
        moved.return_code,
        accepted.amount_minor,
        accepted.currency,
        accepted.source_account_id,
        accepted.settled_at_us,
        *postings_params(move.transfers, move.entries, move.adjustments, move.adjustment_events),
        *events_params(plan),
    )


RETURN: Final = ObjectApply(
    Planning(
        machine=payouts.MACHINE,
        takes=is_return,
        result_of=payout_result,
        settled_status=return_plan.returned_status,
        plan_move=return_plan.plan_move,
        new_ids=_new_ids,
        moved=lambda move: move.payout,
        confirmed_cause=_no_confirmation,
        move_facts=_return_facts,
    ),
    Writing(
        write_move=return_repository.write_move,
        apply_call=apply_object_repository.RETURN_PAYOUT,
        apply_params=_apply_params,
    ),
)
