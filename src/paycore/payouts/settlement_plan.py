"""A payout's settlement on the bank's word, planned for the data plane (ADR 0026 step 3): pure
functions from the payout as read (`sent`), the machine's decision and the bank's fee to every row
the reference path (`lifecycle.apply_evidence`) writes when the bank says the payout settled.

The reference path's move, one step of the transition table (`sent -> settled`): the
compare-and-set (`Machine.changes`, the one home of what a move writes: the status, its time, the
fault and the schedule cleared, `settled_at_us`, the bank's reference and batch), its effect
(`money.pay_out`: a posted transfer, the in-transit account debited and the bank's cash credited,
the payout's amount), the state event with its snapshot; then the bank's fee
(`lifecycle.record_bank_fee`, a fee above zero only): a posted transfer (`ledger.bank_fee_spec`:
the fees account debited, the bank's cash credited), the adjustment row (`bank:fee`, booked on the
day the bank's fee was charged: today, since a webhook carries no settlement time) and its audit
event. The accounts go by their codes: the write finds them (a payout's first schedule created
them, `create_plan.py`). A payout still `processing` or `in_doubt` moves two steps, as the
reference path moves it (`TwoSteps`: the payout's settle to `sent` by `settle_plan.plan_move`, the
hold posted, then this settlement a microsecond later, the bank's fee booked at the webhook's
time). A mismatch has no plan: the reference path's. A return is `return_plan.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext, event_row
from paycore.kit.clock import utc_day
from paycore.ledger import chart
from paycore.lifecycle.evidence import Decision
from paycore.payouts import lifecycle, money, settle_plan, states
from paycore.payouts.types import Payout

MACHINE: Final = lifecycle.MACHINE
# The columns a move to `settled` writes (`Machine.changes`), every one of them.
WRITTEN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "bank_reference",
    "batch_id",
    "settled_at_us",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
)
FEE_DEDUPE_KEY: Final = "bank:fee"  # `lifecycle.record_bank_fee`'s
_WAITING: Final = (states.PROCESSING, states.IN_DOUBT)


@dataclass(frozen=True)
class NewIds:
    """In the reference path's order: the payout's transfer and its two entries, the state
    event, the adjustment, its transfer and two entries, the adjustment's audit event."""

    transfer_id: str
    entry_ids: tuple[str, str]
    state_event_id: str
    adjustment_id: str
    fee_transfer_id: str
    fee_entry_ids: tuple[str, str]
    adjustment_event_id: str
    # A payout still waiting moves to `sent` first: that step's ids, made before the others.
    first: settle_plan.NewIds | None = None


@dataclass(frozen=True)
class PlannedEntry:
    id: str
    transfer_id: str
    account_code: str | None  # found by its code, in the payout's tenant (None: by `account_id`)
    direction: str
    amount_minor: int
    account_id: str | None = None  # the payout's source, by its id


@dataclass(frozen=True)
class Move:
    """A payout's compare-and-set to `settled`, its posted transfers, its state event, and the
    bank's fee adjustment (None for a fee of zero)."""

    accepted: Payout  # as read: what the compare-and-set expects
    payout: Payout  # as the compare-and-set leaves it
    changes: dict[str, Any]  # exactly `WRITTEN_COLUMNS`
    transfers: tuple[dict[str, Any], ...]  # the payout's, then the fee's: `ledger_transfers` rows
    entries: tuple[PlannedEntry, ...]  # in the reference path's order
    state_event: dict[str, Any]  # the state change's row (`lifecycle.recording.event_row`)
    adjustment: dict[str, Any] | None  # the `payout_adjustments` row of the bank's fee
    adjustment_event: dict[str, Any] | None  # its audit event (`audit.record_other`)

    @property
    def expected_status(self) -> str:
        return self.accepted.status


class TwoSteps(settle_plan.Steps[settle_plan.Move, Move]):
    """A payout still `processing` or `in_doubt` settled by the bank's word, as the reference path
    moves it (`Machine.apply_evidence`, step by step): `first` to `sent` (the hold posted) at the
    webhook's time, `second` settled a microsecond later (`Machine.changes`), the fee at the
    webhook's time."""


def settled_status(payout: Payout, decision: Decision) -> str | None:
    """`settled` where `decision` moves a `sent` payout there in one step, or a waiting one in
    two (through `sent`); None where the reference path decides."""
    steps = (states.SETTLED,) if payout.status == states.SENT else (states.SENT, states.SETTLED)
    if payout.status not in (states.SENT, *_WAITING) or decision.path != steps:
        return None
    if not decision.values.keys() <= {"bank_reference", "batch_id"}:
        return None
    assert MACHINE.allowed(payout.status, steps[0])
    return states.SETTLED


def plan_steps(
    payout: Payout,
    target: str,
    decision: Decision,
    *,
    cause: str,
    actor: str,
    now_us: int,
    new_ids: NewIds,
    context: EventContext,
    fee_minor: int,
) -> Move | TwoSteps:
    """The settlement of `payout` (as read): one step from `sent`, two from `processing` or
    `in_doubt` (the second at the first's time plus one, as `Machine.changes` makes it)."""
    assert settled_status(payout, decision) == target, (payout.status, decision)
    if payout.status == states.SENT:
        return plan_move(
            payout,
            target,
            decision,
            cause=cause,
            actor=actor,
            now_us=now_us,
            new_ids=new_ids,
            context=context,
            fee_minor=fee_minor,
        )
    assert new_ids.first is not None, "a waiting payout's ids have its first step's"
    to_sent = Decision((states.SENT,), decision.values, decision.data)
    first = settle_plan.plan_move(
        payout, states.SENT, to_sent, cause=cause, actor=actor, now_us=now_us, new_ids=new_ids.first, context=context
    )
    second = plan_move(
        first.payout,
        target,
        Decision((states.SETTLED,), decision.values, decision.data),
        cause=cause,
        actor=actor,
        now_us=first.payout.updated_at_us + 1,
        new_ids=new_ids,
        context=context,
        fee_minor=fee_minor,
        fee_at_us=now_us,
    )
    assert second.accepted == first.payout and second.payout.sent_at_us == first.payout.updated_at_us
    return TwoSteps(first, second)


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
    fee_minor: int,
    fee_at_us: int | None = None,
) -> Move:
    """The settlement of a `sent` payout (as read) as `decision` says, with the bank's fee (booked
    at `fee_at_us`, else at the move's time): the one home of a payout's settlement on the data
    plane."""
    assert settled_status(payout, decision) == target and now_us > payout.updated_at_us, (payout, target)
    assert payout.status == states.SENT and fee_minor >= 0, (payout.status, fee_minor)
    changes, moved, state_event = settle_plan.step(
        payout,
        target,
        decision,
        cause=cause,
        actor=actor,
        now_us=now_us,
        event_id=new_ids.state_event_id,
        context=context,
    )
    fee_at = moved.updated_at_us if fee_at_us is None else fee_at_us
    codes = {prefix: chart.code(prefix, payout.currency) for prefix in (money.IN_TRANSIT, money.BANK_CASH, money.FEES)}
    transfers = [transfer_row(payout, new_ids.transfer_id, "payout", moved.updated_at_us)]
    entries = entry_pair(
        new_ids.transfer_id, new_ids.entry_ids, codes[money.IN_TRANSIT], codes[money.BANK_CASH], payout.amount_minor
    )
    adjustment = adjustment_event = None
    if fee_minor > 0:  # `record_bank_fee`: nothing for a fee of zero
        transfers.append(transfer_row(payout, new_ids.fee_transfer_id, "adjustment", fee_at))
        entries += entry_pair(
            new_ids.fee_transfer_id, new_ids.fee_entry_ids, codes[money.FEES], codes[money.BANK_CASH], fee_minor
        )
        fee = Adjusted("fee", fee_minor, None, utc_day(fee_at).isoformat(), FEE_DEDUPE_KEY)
        ids = (new_ids.adjustment_id, new_ids.fee_transfer_id, new_ids.adjustment_event_id)
        adjustment, adjustment_event = adjustment_rows(payout, fee, ids, actor=actor, now_us=fee_at, context=context)
    move = Move(payout, moved, changes, tuple(transfers), entries, state_event, adjustment, adjustment_event)
    check_move(move)
    return move


def transfer_row(payout: Payout, transfer_id: str, reference_type: str, now_us: int) -> dict[str, Any]:
    """A posted transfer the payout owns, as `postings.transfer_values` makes it."""
    return {
        "tenant_id": payout.tenant_id,
        "id": transfer_id,
        "kind": "transfer",
        "pending_id": None,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": reference_type,
        "reference_id": payout.id,
        "owner_id": payout.id,
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": now_us,
    }


def entry_pair(
    transfer_id: str, entry_ids: tuple[str, str], debited: str, credited: str, amount_minor: int
) -> tuple[PlannedEntry, ...]:
    return (
        PlannedEntry(entry_ids[0], transfer_id, debited, "debit", amount_minor),
        PlannedEntry(entry_ids[1], transfer_id, credited, "credit", amount_minor),
    )


@dataclass(frozen=True)
class Adjusted:
    """An adjustment the bank's word books (`adjustments.record`'s `NewAdjustment`, its source the bank)."""

    kind: str
    amount_minor: int
    code: str | None
    effective_on: str  # YYYY-MM-DD
    dedupe_key: str


def adjustment_rows(
    payout: Payout,
    adjusted: Adjusted,
    new_ids: tuple[str, str, str],
    *,
    actor: str,
    now_us: int,
    context: EventContext,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The adjustment row and the audit event `adjustments.record` writes for the bank's
    adjustment; `new_ids` are the adjustment's, its transfer's and its audit event's."""
    adjustment_id, transfer_id, event_id = new_ids
    adjustment = {
        "tenant_id": payout.tenant_id,
        "id": adjustment_id,
        "payout_id": payout.id,
        "kind": adjusted.kind,
        "amount_minor": adjusted.amount_minor,
        "currency": payout.currency,
        "code": adjusted.code,
        "effective_on": adjusted.effective_on,
        "source": "bank",
        "dedupe_key": adjusted.dedupe_key,
        "transfer_id": transfer_id,
        "note": None,
        "created_at_us": now_us,
    }
    event = event_row(
        payout.tenant_id,
        event_id=event_id,
        context=context,
        kind="adjustment",
        type=f"payout.adjustment.{adjusted.kind}",
        object_type=MACHINE.object_type,
        object_id=payout.id,
        from_state=None,
        to_state=None,
        cause="bank",
        actor=actor,
        now_us=now_us,
        data={"adjustment_id": adjustment_id, "amount_minor": adjusted.amount_minor, "code": adjusted.code},
    )
    return adjustment, event


def check_move(move: Move) -> None:
    """Pair assertions: one step from `sent`; every transfer balances and the payout's moves its
    amount; the columns written are the move's; the fee's rows go together, at the move's time."""
    accepted, moved, changes = move.accepted, move.payout, move.changes
    assert (accepted.status, moved.status) == (states.SENT, states.SETTLED)
    assert changes.keys() == set(WRITTEN_COLUMNS), changes.keys() ^ set(WRITTEN_COLUMNS)
    assert changes["settled_at_us"] == changes["updated_at_us"] == moved.updated_at_us
    assert (moved.next_attempt_at_us, moved.claimed_by, moved.claimed_until_us) == (None, None, None)
    for transfer in move.transfers:
        sides = [entry for entry in move.entries if entry.transfer_id == transfer["id"]]
        assert [entry.direction for entry in sides] == ["debit", "credit"], sides
        assert sides[0].amount_minor == sides[1].amount_minor > 0
        assert transfer["created_at_us"] <= moved.updated_at_us and transfer["owner_id"] == moved.id
    assert move.transfers[0]["created_at_us"] == moved.updated_at_us, "the payout's transfer at its move"
    assert move.entries[0].amount_minor == accepted.amount_minor
    assert (move.adjustment is None) == (move.adjustment_event is None) == (len(move.transfers) == 1)
    if move.adjustment is not None and move.adjustment_event is not None:
        assert move.adjustment["transfer_id"] == move.transfers[1]["id"]
        assert move.adjustment["amount_minor"] == move.entries[2].amount_minor
        assert move.adjustment_event["actor"] == move.state_event["actor"]
        fee_at = move.transfers[1]["created_at_us"]
        assert move.adjustment_event["created_at_us"] == move.adjustment["created_at_us"] == fee_at
    state_event = move.state_event
    assert (state_event["from_state"], state_event["to_state"]) == ("sent", "settled")
    assert state_event["created_at_us"] == moved.updated_at_us and "object_sequence" not in state_event
