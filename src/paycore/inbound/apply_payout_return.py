"""The bank's webhook that returns a settled payout, on the data plane (ADR 0026 step 3): the data
of the one shape (`apply_object.py`, `apply_object_plan.py`, `apply_object_repository.py`) for a
payout's return.

The case: a payout event saying `returned` for a payout `settled` (the bank paid the beneficiary,
whose bank sent it back), of the event's amount, currency and rail, inside the return's window.
The move is `payouts.return_plan.plan_move` (the compare-and-set, the state event, the return's
and the return fee's transfers and adjustments with their audit events), written by
`payouts.return_repository.write_move` on SQLite and by migration `*_inbound_payout_return.py`'s
`paycore_inbound_return_payout` on PostgreSQL.

Its plain case: a return past its window, for a payout `settled` (of the event's amount, currency
and rail). The reference path changes nothing, writes the refusal's note
(`return_plan.plan_refusal`: `payout.return_refused`, `return_window_closed`, the window's close)
and records the audit event with the cause `late`, the stored event `stale`: by migration
`*_inbound_payout_return_steps.py`'s `paycore_inbound_refuse_payout_return` (the confirm function
of `*_inbound_payouts.py`, the payout locked in `settled`, then the note) or the confirm's list
with the note (3 statements after the read). A payout returned already or a redelivery, a payout
in any other status (two or three steps) and a mismatch are the reference path's.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.audit.rows import EventContext
from paycore.audit.statements import state_event_args
from paycore.db import driver
from paycore.inbound import apply_object_repository
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.apply_object_plan import Confirmation, Plan, Planning
from paycore.inbound.apply_object_repository import Writing, events_params, stored_event_params
from paycore.inbound.apply_payout import confirm_params, payout_result
from paycore.inbound.apply_payout_settlement import moved as settlement_moved
from paycore.inbound.apply_payout_settlement import new_ids as settlement_ids
from paycore.inbound.apply_payout_settlement import postings_params, settlement_params
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors, ids
from paycore.lifecycle.evidence import Evidence
from paycore.payouts import return_plan, return_repository, settle_plan, states
from paycore.payouts import service as payouts
from paycore.payouts.return_plan import Move, NewIds, ReturnSteps
from paycore.payouts.settlement_plan import TwoSteps
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult


def is_return(event: ProcessorEvent) -> bool:
    """A payout event that may return its payout: the data plane's to try."""
    data = event.data
    return data.object == "payout" and data.status == "returned" and data.rail is not None


def _no_confirmation(event: ProcessorEvent, payout: Payout) -> str | None:
    return None


def late_refusal(
    event: ProcessorEvent, payout: Payout, *, now_us: int, event_id: str, context: EventContext
) -> tuple[str, dict[str, Any]] | None:
    """(`late`, the refusal's note) where the bank's return finds `payout` settled, of its amount,
    currency and rail, past its window (`lifecycle.apply_evidence`: no path, matched, then
    `record_bank_return`'s check); None for everything else."""
    result = payout_result(event)
    if payout.status != states.SETTLED or payout.settled_at_us is None or not payouts.MACHINE.matches(payout, result):
        return None  # a mismatch is recorded as one: the reference path's
    assert not payouts.MACHINE.decide(payout.status, Evidence.of_result(result)).path, "the return's own step"
    note = return_plan.plan_refusal(
        payout,
        return_code=result.return_code,
        returned_at_us=result.returned_at_us,
        actor=actors.PROCESSOR,
        now_us=now_us,
        event_id=event_id,
        context=context,
    )
    return None if note is None else (return_plan.LATE, note)


def _refusal_params(confirmation: Confirmation[Payout]) -> tuple[Any, ...]:
    [note] = confirmation.notes
    assert confirmation.audit_event["cause"] == return_plan.LATE, confirmation.audit_event
    return (*confirm_params(confirmation), note["id"], note["type"], note["cause"], note["data"])


def _return_facts(result: PayoutResult) -> dict[str, Any]:
    return {
        "fee_minor": result.fee_minor,  # the bank's fee, booked where the return settles the payout first
        "return_code": result.return_code,
        "return_amount_minor": result.return_amount_minor,
        "return_fee_minor": result.return_fee_minor,
        "returned_at_us": result.returned_at_us,
    }


def _new_ids() -> NewIds:
    # In the reference path's order (a payout not settled yet: its settlement's, `settlement_ids`;
    # then the state event; `adjustments.record`'s adjustment, its transfer and entries, its audit
    # event, for the return and then its fee; the webhook's audit event after them): ids made in
    # one process increase.
    settlement = settlement_ids()
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
        settlement=settlement,
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


def _steps_params(plan: Plan[ReturnSteps]) -> tuple[Any, ...]:
    """A settlement function's arguments (`apply_payout_settlement.settlement_params`: the event
    stored, the payout settled, the fee, the audit event), then `paycore_payout_return`'s after
    the tenant and the payout."""
    settlement, returned = plan.move.first, plan.move.second
    settled, moved = returned.accepted, returned.payout
    booked_at_us = plan.webhook["created_at_us"]
    assert settled.updated_at_us == settled.settled_at_us and moved.updated_at_us == settled.updated_at_us + 1
    assert all(row["created_at_us"] == booked_at_us for row in returned.adjustments)
    return (
        *settlement_params(Plan(plan.webhook, settlement, plan.audit_event)),
        settled.settled_at_us,
        moved.updated_at_us,
        moved.return_code,
        settled.amount_minor,
        settled.currency,
        settled.source_account_id,
        *postings_params(returned.transfers, returned.entries, returned.adjustments, returned.adjustment_events),
        booked_at_us,
        *state_event_args(returned.state_event),
    )


def _return_call(plan: Plan[Move | ReturnSteps]) -> driver.Statement:
    move = plan.move
    if not isinstance(move, ReturnSteps):
        return apply_object_repository.RETURN_PAYOUT
    if isinstance(move.first, TwoSteps):
        return apply_object_repository.RETURN_WAITING_PAYOUT
    return apply_object_repository.RETURN_SENT_PAYOUT


def _return_params(plan: Plan[Move | ReturnSteps]) -> tuple[Any, ...]:
    move = plan.move
    if isinstance(move, ReturnSteps):
        return _steps_params(Plan(plan.webhook, move, plan.audit_event))
    return _apply_params(Plan(plan.webhook, move, plan.audit_event))


def _moved(move: Move | ReturnSteps) -> Payout:
    """The payout as the move's first step leaves it, at the webhook's time (`check_plan`)."""
    return settlement_moved(move.first) if isinstance(move, ReturnSteps) else move.payout


RETURN: Final = ObjectApply(
    Planning(
        machine=payouts.MACHINE,
        takes=is_return,
        result_of=payout_result,
        settled_status=return_plan.returned_status,
        plan_move=return_plan.plan_steps,
        new_ids=_new_ids,
        moved=_moved,
        confirmed_cause=_no_confirmation,
        move_facts=_return_facts,
        confirmed_note=late_refusal,
    ),
    Writing(
        write_move=return_repository.write_move,
        apply_call=_return_call,
        apply_params=_return_params,
        confirm_call=apply_object_repository.REFUSE_PAYOUT_RETURN,
        confirm_params=_refusal_params,
    ),
)
