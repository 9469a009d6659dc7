"""The bank's webhook that settles a sent payout, on the data plane (ADR 0026 step 3): the data of
the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payout's settlement.

The case: a payout event saying `settled` for a payout `sent` (the bank accepted it into a batch,
its answer moved it; now it paid the beneficiary), of the event's amount, currency and rail. The
move is `payouts.settlement_plan.plan_move` (the compare-and-set, the transfer from the in-transit
account to the bank's cash, the state event, the bank's fee with its adjustment), written by
`payouts.settlement_repository.write_move` on SQLite and by migration
`*_inbound_payout_settlement.py`'s `paycore_inbound_settle_payout` on PostgreSQL.

A payout still `processing` or `in_doubt` (the bank's answer to the send was lost, or its
`accepted` not heard yet) moves two steps, as the reference path moves it
(`settlement_plan.TwoSteps`): its settle to `sent` (`payouts.settle_plan`, the hold posted) and
the settlement, written by both lists on SQLite and by migration `*_inbound_payout_return.py`'s
`paycore_inbound_settle_waiting_payout` (around `paycore_payouts_settle`) on PostgreSQL.

No plain case: a `settled` word for a payout settled already is the reference path's (it reads
whether the word contradicts what a person confirmed), and so is a redelivery and a mismatch. A
`returned` word is `apply_payout_return.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from paycore.db import driver
from paycore.in_doubt.plane import hold_resolution_ids
from paycore.inbound import apply_object_repository
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.apply_payout import payout_result
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.payouts import service as payouts
from paycore.payouts import settle_plan, settlement_plan, settlement_repository
from paycore.payouts.settlement_plan import Move, NewIds, PlannedEntry, TwoSteps
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


_FIRST_IDS = hold_resolution_ids(settle_plan.NewIds)  # a waiting payout's first step, to `sent`


def new_ids() -> NewIds:
    # In the reference path's order (a waiting payout's first step's; `money.pay_out`'s transfer
    # and entries, the state event, `adjustments.record`'s adjustment, its transfer and entries, its
    # audit event; the webhook's audit event after them): ids made in one process increase.
    first = _FIRST_IDS()
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
        first=first,
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


def postings_params(
    transfers: Sequence[dict[str, Any]],
    entries: Sequence[PlannedEntry],
    adjustments: Sequence[dict[str, Any]],
    adjustment_events: Sequence[dict[str, Any]],
) -> tuple[Any, ...]:
    """A payout's postings and the bank's adjustments, as `paycore_payout_post` and
    `paycore_payout_adjust` take them (migration `*_inbound_payout_return.py`)."""
    assert all(row["dedupe_key"] == f"bank:{row['kind']}" for row in adjustments), adjustments
    assert len({row["code"] for row in adjustments}) <= 1 and len({row["effective_on"] for row in adjustments}) <= 1
    first = adjustments[0] if adjustments else {"code": None, "effective_on": None}
    return (
        [transfer["id"] for transfer in transfers],
        [transfer["reference_type"] for transfer in transfers],
        [transfer["created_at_us"] for transfer in transfers],
        [entry.id for entry in entries],
        [entry.transfer_id for entry in entries],
        [entry.account_id for entry in entries],
        [entry.account_code for entry in entries],
        [entry.direction for entry in entries],
        [entry.amount_minor for entry in entries],
        first["code"],
        first["effective_on"],
        [row["id"] for row in adjustments],
        [row["kind"] for row in adjustments],
        [row["amount_minor"] for row in adjustments],
        [row["transfer_id"] for row in adjustments],
        [event["id"] for event in adjustment_events],
        [event["data"] for event in adjustment_events],
    )


def _two_steps_params(plan: Plan[TwoSteps]) -> tuple[Any, ...]:
    first, second = plan.move.first, plan.move.second
    accepted, sent, resolution = first.accepted, first.payout, first.resolution
    assert resolution.post and sent.updated_at_us == plan.webhook["created_at_us"] < second.payout.updated_at_us
    adjustments = () if second.adjustment is None else (second.adjustment,)
    adjustment_events = () if second.adjustment_event is None else (second.adjustment_event,)
    last = Plan(plan.webhook, second, plan.audit_event)  # the last step's state event, the audit event
    return (
        *stored_event_params(plan.webhook),
        accepted.id,
        *settle_plan.as_read(accepted),
        sent.updated_at_us,
        accepted.transfer_id,
        resolution.resolution_id,
        list(resolution.entry_ids or ()),
        first.state_event["id"],
        first.state_event["type"],
        first.state_event["snapshot"],
        second.payout.updated_at_us,
        sent.bank_reference,
        sent.batch_id,
        accepted.amount_minor,
        accepted.currency,
        *postings_params(second.transfers, second.entries, adjustments, adjustment_events),
        *events_params(last),
    )


def settlement_call(plan: Plan[Move | TwoSteps]) -> driver.Statement:
    if isinstance(plan.move, TwoSteps):
        return apply_object_repository.SETTLE_WAITING_PAYOUT
    return apply_object_repository.SETTLE_PAYOUT


def settlement_params(plan: Plan[Move | TwoSteps]) -> tuple[Any, ...]:
    move = plan.move
    if isinstance(move, TwoSteps):
        return _two_steps_params(Plan(plan.webhook, move, plan.audit_event))
    return _apply_params(Plan(plan.webhook, move, plan.audit_event))


def moved(move: Move | TwoSteps) -> Payout:
    """The payout as the move's first step leaves it, at the webhook's time (`check_plan`)."""
    return move.first.payout if isinstance(move, TwoSteps) else move.payout


SETTLEMENT: Final = ObjectApply(
    Planning(
        machine=payouts.MACHINE,
        takes=is_settlement,
        result_of=payout_result,
        settled_status=settlement_plan.settled_status,
        plan_move=settlement_plan.plan_steps,
        new_ids=new_ids,
        moved=moved,
        confirmed_cause=_no_confirmation,
        move_facts=_fee,
    ),
    Writing(
        write_move=settlement_repository.write_move,
        apply_call=settlement_call,
        apply_params=settlement_params,
    ),
)
