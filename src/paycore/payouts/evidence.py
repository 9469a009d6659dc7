"""What the bank said of a payout, applied through the transition table. Used by the worker
that sends (its answer), the resolver (a status query) and webhooks; whoever comes second
finds the payout moved and changes nothing.

A late answer can prove several steps at once (a status query after a lost response may
find the payout already settled): each step is applied and recorded in order, so the
timeline shows `processing -> sent -> settled` with the cause of each.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.payouts import adjustments, states, transitions
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult

# The steps from each state to what the bank reports, in order.
_PATHS: dict[str, dict[str, tuple[str, ...]]] = {
    "accepted": {
        states.PROCESSING: (states.SENT,),
        states.IN_DOUBT: (states.SENT,),
    },
    "rejected": {
        states.PROCESSING: (states.FAILED,),
        states.IN_DOUBT: (states.FAILED,),
        states.SENT: (states.FAILED,),
    },
    "settled": {
        states.PROCESSING: (states.SENT, states.SETTLED),
        states.IN_DOUBT: (states.SENT, states.SETTLED),
        states.SENT: (states.SETTLED,),
    },
    "returned": {
        states.PROCESSING: (states.SENT, states.SETTLED, states.RETURNED),
        states.IN_DOUBT: (states.SENT, states.SETTLED, states.RETURNED),
        states.SENT: (states.SETTLED, states.RETURNED),
        states.SETTLED: (states.RETURNED,),
    },
}


def matches(payout: Payout, result: PayoutResult) -> bool:
    """The bank's answer is about this payout as paycore sent it; a return gives back between
    1 minor unit and the whole amount (anything else is for a person to look at)."""
    same = (result.amount_minor, result.currency, result.rail) == (payout.amount_minor, payout.currency, payout.rail)
    returned = result.return_amount_minor
    return same and (returned is None or 0 < returned <= payout.amount_minor)


def apply(
    connection: Connection, payout: Payout, result: PayoutResult, *, cause: str, actor: str, now_us: int
) -> tuple[Payout, str]:
    """Move the payout as far as `result` proves. Returns (payout now, outcome) where outcome
    is applied | no_change | stale | mismatch | late (a return after its window)."""
    if not matches(payout, result):
        return payout, "mismatch"  # never applied: a person looks (the call or webhook is in the log)
    path = _PATHS[result.status].get(payout.status)
    if path is None:
        same = result.status == "accepted" and payout.status in (states.SENT, states.SETTLED, states.RETURNED)
        return payout, "no_change" if same or payout.status not in states.TERMINAL else "stale"
    outcome = "no_change"
    for step in path:
        if step == states.RETURNED:
            returned = adjustments.record_bank_return(
                connection,
                payout,
                code=result.return_code,
                received_minor=payout.amount_minor
                if result.return_amount_minor is None
                else result.return_amount_minor,
                return_fee_minor=result.return_fee_minor,
                returned_at_us=result.returned_at_us or now_us,
                cause=cause,
                now_us=now_us,
            )
            payout = transitions.load(connection, payout.tenant_id, payout.id)
            return payout, returned if returned != "no_change" else outcome
        moved = transitions.move(
            connection, payout, step, cause=cause, actor=actor, now_us=now_us, values=_values(step, result)
        )
        if not moved.changed:
            return moved.payout, outcome
        payout, outcome = moved.payout, "applied"
        if step == states.SETTLED:
            adjustments.record_bank_fee(
                connection, payout, result.fee_minor, charged_at_us=result.settled_at_us, now_us=now_us
            )
    return payout, outcome


def _values(step: str, result: PayoutResult) -> dict[str, object]:
    values: dict[str, object] = {"bank_reference": result.bank_payout_id, "batch_id": result.batch_id}
    if step == states.FAILED:
        values["failure_code"] = result.failure_code or "bank_rejected"
    return values
