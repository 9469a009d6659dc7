"""The bank's webhook that settles a sent payout, on the data plane (ADR 0026 step 3): the data of
the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payout's settlement.

The case: a payout event saying `settled` for a payout `sent` (the bank accepted it into a batch,
its answer moved it; now it paid the beneficiary), of the event's amount, currency and rail. The
move is `payouts.settlement_plan.plan_move` (the compare-and-set, the transfer from the in-transit
account to the bank's cash, the state event, the bank's fee with its adjustment), written by
`payouts.settlement_repository.write_move` on SQLite and by migration
`*_inbound_payout_settlement.py`'s `paycore_inbound_settle_payout` on PostgreSQL.

No plain case: a `settled` word for a payout settled already is the reference path's (it reads
whether the word contradicts what a person confirmed), and so is a redelivery, a payout still
`processing` or `in_doubt` (two steps), a `returned` word (its window, the return's adjustments)
and a mismatch.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.inbound import apply_object_repository
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.apply_payout import payout_result
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.payouts import service as payouts
from paycore.payouts import settle_plan, settlement_plan, settlement_repository
from paycore.payouts.settlement_plan import Move, NewIds
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult


def is_settlement(event: ProcessorEvent) -> bool:
    """A payout event that may settle its payout: the data plane's to try."""
    data = event.data
    return data.object == "payout" and data.status == "settled" and data.rail is not None


def _no_confirmation(event: ProcessorEvent, payout: Payout) -> str | None:
    return None


def _fee(result: PayoutResult) -> dict[str, Any]:
    return {"fee_minor": result.fee_minor}


def _new_ids() -> NewIds:
    # In the reference path's order (`money.pay_out`'s transfer and entries, the state event,
    # `adjustments.record`'s adjustment, its transfer and entries, its audit event; the webhook's
    # audit event after them): ids made in one process increase.
    transfer_id, entry_ids, state_event_id = (
        ids.new_id("txn"),
        (ids.new_id("ent"), ids.new_id("ent")),
        ids.new_id("evt"),
    )
    adjustment_id, fee_transfer_id = ids.new_id("adj"), ids.new_id("txn")
    fee_entry_ids = (ids.new_id("ent"), ids.new_id("ent"))
    return NewIds(
        transfer_id=transfer_id,
        entry_ids=entry_ids,
        state_event_id=state_event_id,
        adjustment_id=adjustment_id,
        fee_transfer_id=fee_transfer_id,
        fee_entry_ids=fee_entry_ids,
        adjustment_event_id=ids.new_id("evt"),
    )


def _apply_params(plan: Plan[Move]) -> tuple[Any, ...]:
    move = plan.move
    accepted, moved, adjustment, adjustment_event = move.accepted, move.payout, move.adjustment, move.adjustment_event
    assert (moved.bank_reference, moved.batch_id) == (move.changes["bank_reference"], move.changes["batch_id"])
    return (
        *stored_event_params(plan.webhook),
        accepted.id,
        *settle_plan.as_read(accepted),
        moved.updated_at_us,
        moved.bank_reference,
        moved.batch_id,
        accepted.amount_minor,
        accepted.currency,
        [transfer["id"] for transfer in move.transfers],
        [transfer["reference_type"] for transfer in move.transfers],
        [entry.id for entry in move.entries],
        [entry.transfer_id for entry in move.entries],
        [entry.account_code for entry in move.entries],
        [entry.direction for entry in move.entries],
        [entry.amount_minor for entry in move.entries],
        None if adjustment is None else adjustment["id"],
        None if adjustment is None else adjustment["amount_minor"],
        None if adjustment is None else adjustment["effective_on"],
        None if adjustment_event is None else adjustment_event["id"],
        None if adjustment_event is None else adjustment_event["data"],
        *events_params(plan),
    )


SETTLEMENT: Final = ObjectApply(
    Planning(
        machine=payouts.MACHINE,
        takes=is_settlement,
        result_of=payout_result,
        settled_status=settlement_plan.settled_status,
        plan_move=settlement_plan.plan_move,
        new_ids=_new_ids,
        moved=lambda move: move.payout,
        confirmed_cause=_no_confirmation,
        move_facts=_fee,
    ),
    Writing(
        write_move=settlement_repository.write_move,
        apply_call=apply_object_repository.SETTLE_PAYOUT,
        apply_params=_apply_params,
    ),
)
