"""A settled payout's return on the bank's word, planned for the data plane (ADR 0026 step 3): pure
functions from the payout as read (`settled`), the bank's return (its code, what came back, its
fee) and the clock to every row the reference path (`lifecycle.record_bank_return`) writes.

The reference path's move, one step of the transition table (`settled -> returned`), inside the
return's window only (`windows.closes_at_us`, by rail and code, from the payout's settlement): the
compare-and-set (`Machine.changes`: the status, its time, the fault and the schedule cleared, the
return code, `returned_at_us`), the state event with its snapshot; then the return's adjustment
(`adjustments.record`, `bank:return`: a posted transfer giving the source back the whole amount,
from the bank's cash for what came back and from the losses account for what did not) and its
audit event; then the return fee's (`bank:return_fee`, above zero only: the fees account debited,
the bank's cash credited) and its audit event. The adjustments are booked on the day the money
came back (the webhook's time: it carries none). A return past its window has its own plan,
the refusal's note (`plan_refusal`: `record_bank_return`'s `payout.return_refused`, nothing moved).
A payout not settled yet (`sent`, `processing`, `in_doubt`) moves as the reference path moves it
(`ReturnSteps`, `plan_steps`): its settlement first (`settlement_plan.plan_steps`: one step or two,
the bank's fee), then the return a microsecond after the settlement (`Machine.changes`), its
transfers and adjustments booked at the webhook's time. A mismatch has no plan: the reference
path's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext, event_row
from paycore.kit.clock import utc_day
from paycore.ledger import chart
from paycore.lifecycle.evidence import Decision
from paycore.payouts import lifecycle, money, settle_plan, settlement_plan, states, windows
from paycore.payouts.settlement_plan import Adjusted, PlannedEntry, adjustment_rows, entry_pair, transfer_row
from paycore.payouts.types import Payout

MACHINE: Final = lifecycle.MACHINE
# The columns a move to `returned` writes (`Machine.changes`), every one of them.
WRITTEN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "return_code",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "returned_at_us",
    "in_doubt_since_us",
)
RETURN_DEDUPE_KEY: Final = "bank:return"  # `lifecycle.record_bank_return`'s
RETURN_FEE_DEDUPE_KEY: Final = "bank:return_fee"
# A return past its window: `record_bank_return`'s note, and what `apply_evidence` answers.
REFUSAL_TYPE: Final = "payout.return_refused"
REFUSAL_CAUSE: Final = "return_window_closed"
LATE: Final = "late"


@dataclass(frozen=True)
class NewIds:
    """In the reference path's order: the state event; the return's adjustment, transfer, three
    entries (the bank's cash, the losses account, the source) and audit event; the return fee's
    adjustment, transfer, two entries and audit event."""

    state_event_id: str
    return_ids: tuple[str, str, str]  # adjustment, transfer, audit event
    return_entry_ids: tuple[str, str, str]
    fee_ids: tuple[str, str, str]
    fee_entry_ids: tuple[str, str]
    # A payout not settled yet is settled first: that settlement's ids, made before the others.
    settlement: settlement_plan.NewIds | None = None


@dataclass(frozen=True)
class Move:
    """A payout's compare-and-set to `returned`, its state event, its posted transfers with their
    entries, and its adjustments (the return's; the return fee's, if any) with their audit events."""

    accepted: Payout  # as read: what the compare-and-set expects
    payout: Payout  # as the compare-and-set leaves it
    changes: dict[str, Any]  # exactly `WRITTEN_COLUMNS`
    transfers: tuple[dict[str, Any], ...]  # the return's, then the fee's: `ledger_transfers` rows
    entries: tuple[PlannedEntry, ...]  # in the reference path's order
    state_event: dict[str, Any]
    adjustments: tuple[dict[str, Any], ...]  # `payout_adjustments` rows, each with its transfer
    adjustment_events: tuple[dict[str, Any], ...]

    @property
    def expected_status(self) -> str:
        return self.accepted.status


class ReturnSteps(settle_plan.Steps[settlement_plan.Move | settlement_plan.TwoSteps, Move]):
    """A payout not settled yet returned by the bank's word, as the reference path moves it
    (`lifecycle.apply_evidence`): `first` its settlement (from `sent`, or through `sent`) at the
    webhook's time, the fee with it; `second` its return a microsecond after the settlement."""


def returned_status(payout: Payout, decision: Decision) -> str | None:
    """`returned` for a settled payout the bank's return finds settled (the return's own step,
    `lifecycle.decide`: no path), or for one the decision settles first (`sent`: one step;
    `processing`, `in_doubt`: two); None where the reference path decides."""
    if payout.status != states.SETTLED:
        return states.RETURNED if settlement_plan.settled_status(payout, decision) == states.SETTLED else None
    if decision.path or payout.settled_at_us is None:
        return None
    assert MACHINE.allowed(payout.status, states.RETURNED)
    return states.RETURNED


def plan_steps(
    payout: Payout,
    target: str,
    decision: Decision,
    *,
    new_ids: NewIds,
    fee_minor: int,
    **how: Any,
) -> Move | ReturnSteps | None:
    """The return of `payout` (as read): from `settled`, `plan_move`; else its settlement first
    (the bank's fee with it), then the return at the settlement's time plus one, its postings at
    the webhook's (`how["now_us"]`); None for a return past its window."""
    assert returned_status(payout, decision) == target == states.RETURNED, (payout.status, decision)
    facts = {name: how.pop(name) for name in ("return_code", "return_amount_minor", "return_fee_minor")}
    returned_at_us = how.pop("returned_at_us")
    if payout.status == states.SETTLED:
        return plan_move(payout, target, decision, new_ids=new_ids, returned_at_us=returned_at_us, **facts, **how)
    assert new_ids.settlement is not None, "a payout not settled yet has its settlement's ids"
    settlement = settlement_plan.plan_steps(
        payout, states.SETTLED, decision, new_ids=new_ids.settlement, fee_minor=fee_minor, **how
    )
    settled, now_us = settlement.payout, how.pop("now_us")
    returned = plan_move(
        settled,
        target,
        Decision(),  # the return's own step (`lifecycle.decide`: no path from `settled`)
        new_ids=new_ids,
        now_us=settled.updated_at_us + 1,
        booked_at_us=now_us,
        returned_at_us=returned_at_us or now_us,
        **facts,
        **how,
    )
    if returned is None:
        return None
    assert returned.accepted == settled and settled.updated_at_us >= now_us
    return ReturnSteps(settlement, returned)


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
    return_code: str | None,
    return_amount_minor: int | None,
    return_fee_minor: int,
    returned_at_us: int | None,
    booked_at_us: int | None = None,
) -> Move | None:
    """The return of a settled `payout` (as read): the one home of a payout's return on the data
    plane, its transfers and adjustments booked at `booked_at_us` (else at the move's time); None
    for a return past its window (the reference path records the refusal)."""
    assert returned_status(payout, decision) == target and now_us > payout.updated_at_us, (payout, target)
    assert payout.settled_at_us is not None and return_fee_minor >= 0
    booked_at = now_us if booked_at_us is None else booked_at_us
    returned_at = returned_at_us or booked_at
    if closed_at_us(payout, return_code, returned_at) is not None:
        return None
    received_minor = payout.amount_minor if return_amount_minor is None else return_amount_minor
    assert 0 < received_minor <= payout.amount_minor, "matches refuses any other amount"
    values = {"return_code": return_code}
    changes, moved, state_event = settle_plan.step(
        payout,
        target,
        Decision((target,), values),
        cause=cause,
        actor=actor,
        now_us=now_us,
        event_id=new_ids.state_event_id,
        context=context,
    )
    day = utc_day(returned_at).isoformat()  # the day the bank says the money came back
    returned = Adjusted("return", received_minor, return_code, day, RETURN_DEDUPE_KEY)
    transfers, entries = (
        [transfer_row(payout, new_ids.return_ids[1], "adjustment", booked_at)],
        _return_entries(payout, new_ids, received_minor),
    )
    rows = [adjustment_rows(payout, returned, new_ids.return_ids, actor=actor, now_us=booked_at, context=context)]
    if return_fee_minor > 0:
        fee = Adjusted("return_fee", return_fee_minor, return_code, day, RETURN_FEE_DEDUPE_KEY)
        fees, cash = (chart.code(prefix, payout.currency) for prefix in (money.FEES, money.BANK_CASH))
        transfers.append(transfer_row(payout, new_ids.fee_ids[1], "adjustment", booked_at))
        entries += entry_pair(new_ids.fee_ids[1], new_ids.fee_entry_ids, fees, cash, return_fee_minor)
        rows.append(adjustment_rows(payout, fee, new_ids.fee_ids, actor=actor, now_us=booked_at, context=context))
    adjustments, events = zip(*rows, strict=True)
    move = Move(payout, moved, changes, tuple(transfers), entries, state_event, adjustments, events)
    check_move(move)
    return move


def closed_at_us(payout: Payout, return_code: str | None, returned_at_us: int) -> int | None:
    """When the return window of a settled `payout` closed, for a return with `return_code` at
    `returned_at_us` that came too late (`record_bank_return`'s check); None inside the window."""
    assert payout.settled_at_us is not None, payout
    closes_at_us = windows.closes_at_us(payout.rail, return_code, payout.settled_at_us)
    return closes_at_us if returned_at_us >= closes_at_us else None


def plan_refusal(
    payout: Payout,
    *,
    return_code: str | None,
    returned_at_us: int | None,
    actor: str,
    now_us: int,
    event_id: str,
    context: EventContext,
) -> dict[str, Any] | None:
    """The note `record_bank_return` writes for a return of the settled `payout` (as read) past
    its window, at `now_us`: the payout unchanged; None inside the window (`plan_move`'s)."""
    assert payout.status == states.SETTLED, payout
    closes_at_us = closed_at_us(payout, return_code, returned_at_us or now_us)
    if closes_at_us is None:
        return None
    note = event_row(
        payout.tenant_id,
        event_id=event_id,
        context=context,
        kind="note",
        type=REFUSAL_TYPE,
        object_type=MACHINE.object_type,
        object_id=payout.id,
        from_state=None,
        to_state=None,
        cause=REFUSAL_CAUSE,
        actor=actor,
        now_us=now_us,
        data={"return_code": return_code, "window_closed_at_us": closes_at_us},
    )
    assert "snapshot" not in note and note["created_at_us"] == now_us
    return note


def _return_entries(payout: Payout, new_ids: NewIds, received_minor: int) -> tuple[PlannedEntry, ...]:
    """`money._return`'s: the bank's cash debited what came back, the losses account what did not
    (if anything), the source credited the whole amount."""
    transfer_id, (cash_id, loss_id, source_id) = new_ids.return_ids[1], new_ids.return_entry_ids
    code = {prefix: chart.code(prefix, payout.currency) for prefix in (money.BANK_CASH, money.LOSSES)}
    entries = [PlannedEntry(cash_id, transfer_id, code[money.BANK_CASH], "debit", received_minor)]
    short_minor = payout.amount_minor - received_minor
    if short_minor > 0:
        entries.append(PlannedEntry(loss_id, transfer_id, code[money.LOSSES], "debit", short_minor))
    entries.append(PlannedEntry(source_id, transfer_id, None, "credit", payout.amount_minor, payout.source_account_id))
    return tuple(entries)


def check_move(move: Move) -> None:
    """Pair assertions: one step from `settled`; every transfer balances, the return's gives the
    source the payout's amount; the columns written are the move's; each adjustment has its
    transfer and its audit event, at their booking's time (the move's, or before it)."""
    accepted, moved, changes = move.accepted, move.payout, move.changes
    assert (accepted.status, moved.status) == (states.SETTLED, states.RETURNED)
    assert changes.keys() == set(WRITTEN_COLUMNS), changes.keys() ^ set(WRITTEN_COLUMNS)
    assert changes["returned_at_us"] == changes["updated_at_us"] == moved.updated_at_us
    for transfer in move.transfers:
        sides = [entry for entry in move.entries if entry.transfer_id == transfer["id"]]
        debits = sum(entry.amount_minor for entry in sides if entry.direction == "debit")
        assert debits == sum(entry.amount_minor for entry in sides if entry.direction == "credit") > 0, sides
        assert transfer["created_at_us"] <= moved.updated_at_us and transfer["owner_id"] == moved.id
    source = [entry for entry in move.entries if entry.account_id is not None]
    assert [(entry.account_id, entry.amount_minor) for entry in source] == [
        (accepted.source_account_id, accepted.amount_minor)
    ]
    assert len(move.adjustments) == len(move.adjustment_events) == len(move.transfers)
    for adjustment, event, transfer in zip(move.adjustments, move.adjustment_events, move.transfers, strict=True):
        assert adjustment["transfer_id"] == transfer["id"] and event["data"] is not None
        assert event["created_at_us"] == adjustment["created_at_us"] == transfer["created_at_us"]
    state_event = move.state_event
    assert (state_event["from_state"], state_event["to_state"]) == ("settled", "returned")
    assert state_event["created_at_us"] == moved.updated_at_us and "object_sequence" not in state_event
