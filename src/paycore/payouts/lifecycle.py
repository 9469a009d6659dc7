"""The only place a payout's status changes (SPEC §11): the payout's machine for the one
lifecycle (`paycore.lifecycle`), its ledger effects, and what the bank's evidence proves.

Every change is a compare-and-set through the transition table (`states`), in one transaction
with its ledger effect and audit event. The payout cancel race: a cancel and a worker's claim
both move a `queued` payout by compare-and-set on its status (`service.cancel`,
`paycore.in_doubt.resolver`): exactly one of the two wins, and the loser sees the winner's state.

A late answer can prove several steps at once (a status query after a lost response may find
the payout already settled): each step is applied and recorded in order, so the timeline
shows `processing -> sent -> settled` with the cause of each. A return is applied only inside
its window (`record_bank_return`); the bank's fee is booked at settlement.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit.clock import utc_day
from paycore.lifecycle.columns import IN_DOUBT_SINCE_US, UNSCHEDULED
from paycore.lifecycle.evidence import MANUAL_FAILURE_CODE, Applied, Decision, Evidence, Reason
from paycore.lifecycle.machine import Machine
from paycore.payouts import adjustments, money, states, windows
from paycore.payouts.errors import PayoutNotFound
from paycore.payouts.models import payouts
from paycore.payouts.schemas import payout_json
from paycore.payouts.types import Payout, payout_from_row, payout_row
from paycore.processor.port import PayoutResult

SEND_OPERATION = "send_payout"
CANCEL_CAUSE = "cancel_requested"  # a cancel's state event (`service.cancel`, `cancel_plan`)

# The steps from each state to what the bank reports, in order. A return's last step
# (settled -> returned) is `record_bank_return`'s: it checks the return window.
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
        states.PROCESSING: (states.SENT, states.SETTLED),
        states.IN_DOUBT: (states.SENT, states.SETTLED),
        states.SENT: (states.SETTLED,),
    },
}
# Where each bank status ends (for a status with no path from the payout's state: stale or not).
_FINAL = {"accepted": states.SENT, "rejected": states.FAILED, "settled": states.SETTLED, "returned": states.RETURNED}


def decide(current: str, evidence: Evidence[Any]) -> Decision:
    if evidence.kind == "manual":  # a person's word: paid (through sent), or never paid
        if evidence.outcome == "failed":
            return Decision((states.FAILED,), {"failure_code": MANUAL_FAILURE_CODE})
        return Decision(_PATHS["settled"].get(current, ()))
    result = evidence.result
    if isinstance(result, PayoutResult):
        values: dict[str, Any] = {"bank_reference": result.bank_payout_id, "batch_id": result.batch_id}
        path = _PATHS[result.status].get(current)
        if path is None:
            already = result.status == "accepted" and current in (states.SENT, states.SETTLED, states.RETURNED)
            already |= result.status == "returned" and current == states.SETTLED  # the return's own step
            return Decision() if already else Decision((_FINAL[result.status],))
        if result.status == "rejected":
            values["failure_code"] = result.failure_code or "bank_rejected"
        return Decision(path, values)
    if evidence.kind == "refused" and evidence.operation == SEND_OPERATION:
        return Decision((states.FAILED,), {"failure_code": evidence.refusal_code or "bank_refused"})
    if evidence.kind == "unreachable" and current == states.PROCESSING:
        return Decision((states.IN_DOUBT,))
    return Decision()  # not found yet, a refused status query, or no answer again: ask later


def matches(payout: Payout, result: PayoutResult) -> bool:
    """The bank's answer is about this payout as paycore sent it; a return gives back between
    1 minor unit and the whole amount (anything else is for a person to look at)."""
    same = (result.amount_minor, result.currency, result.rail) == (payout.amount_minor, payout.currency, payout.rail)
    returned = result.return_amount_minor
    return same and (returned is None or 0 < returned <= payout.amount_minor)


def _columns_of(to_state: str, now_us: int) -> dict[str, Any]:
    if to_state == states.SENT:
        return {"sent_at_us": now_us, IN_DOUBT_SINCE_US: None}
    if to_state == states.SETTLED:  # returns come by webhook: nothing left to poll for
        return {"settled_at_us": now_us, **UNSCHEDULED}
    if to_state == states.RETURNED:
        return {"returned_at_us": now_us, IN_DOUBT_SINCE_US: None}
    if to_state in states.TERMINAL:
        return {IN_DOUBT_SINCE_US: None}
    return {}


def _effect(connection: Connection, payout: Payout, to_state: str, now_us: int) -> None:
    if to_state in (states.CANCELED, states.FAILED) and payout.status in states.HELD:
        money.release(connection, payout, now_us=now_us)
    elif to_state == states.FAILED:  # rejected after the bank had accepted it
        money.give_back(connection, payout, now_us=now_us)
    elif to_state == states.SENT:
        money.commit_hold(connection, payout, now_us=now_us)
    elif to_state == states.SETTLED:
        money.pay_out(connection, payout, now_us=now_us)
    # returned: the return adjustment, written with it (record_bank_return)


MACHINE: Machine[Payout] = Machine(
    object_type="payout",
    table=payouts,
    states=states,
    from_row=payout_from_row,
    to_row=payout_row,
    not_found=partial(PayoutNotFound, "no such payout", param="id"),
    effect=_effect,
    columns_of=_columns_of,
    decide=decide,
    matches=matches,
    public=states.public,
    spellings=states.spellings,
    counterparty="bank",
    snapshot=payout_json,
    references=("bank_reference", "idempotency_key", "batch_id"),
    waiting=frozenset({states.PROCESSING, states.IN_DOUBT, states.SENT}),
    moved=("settled_at_us", (states.SETTLED, states.RETURNED)),  # returned since or not
)


def apply_evidence(
    connection: Connection,
    payout: Payout,
    evidence: Evidence[Any],
    *,
    cause: str,
    actor: str,
    now_us: int,
    values: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> Applied[Payout]:
    """What a call, a webhook or a report established (or a person, `Evidence.manual`),
    applied through the machine; then the bank's fee at settlement and a return inside its
    window."""
    if evidence.kind == "refused":
        cause = "bank_refused"
    elif evidence.kind == "unreachable":
        cause = "no_answer"
    applied = MACHINE.apply_evidence(
        connection, payout, evidence, cause=cause, actor=actor, now_us=now_us, values=values, data=data
    )
    reason = "no_change" if applied.reason == "lost_race" else applied.reason
    current, result = applied.item, evidence.result
    if not isinstance(result, PayoutResult) or reason not in ("applied", "no_change"):
        return Applied(current, applied.changed, reason)
    if applied.changed and current.status == states.SETTLED:
        record_bank_fee(
            connection, current, result.fee_minor, charged_at_us=result.settled_at_us, actor=actor, now_us=now_us
        )
    if result.status == "returned" and current.status == states.SETTLED:
        if not applied.changed and not matches(current, result):
            return Applied(current, False, "mismatch")
        returned = record_bank_return(
            connection,
            current,
            code=result.return_code,
            received_minor=current.amount_minor if result.return_amount_minor is None else result.return_amount_minor,
            return_fee_minor=result.return_fee_minor,
            returned_at_us=result.returned_at_us or now_us,
            cause=cause,
            actor=actor,
            now_us=now_us,
        )
        if returned != "no_change":
            outcome: Reason = "applied" if returned == "applied" else "late"
            return Applied(MACHINE.load(connection, current.tenant_id, current.id), outcome == "applied", outcome)
    return Applied(current, applied.changed, reason)


def record_bank_fee(
    connection: Connection, payout: Payout, fee_minor: int, *, charged_at_us: int | None, actor: str, now_us: int
) -> None:
    """The bank's fee for sending, booked on the day the bank says it settled (else today), by
    whoever brought the bank's word (`actor`: a webhook's `processor`, a worker, a run)."""
    if fee_minor > 0:
        new = adjustments.NewAdjustment("fee", fee_minor, effective_on=utc_day(charged_at_us or now_us).isoformat())
        adjustments.record(connection, payout, new, source="bank", dedupe_key="bank:fee", actor=actor, now_us=now_us)


def record_bank_return(
    connection: Connection,
    payout: Payout,
    *,
    code: str | None,
    received_minor: int,
    return_fee_minor: int,
    returned_at_us: int,
    cause: str,
    actor: str,
    now_us: int,
) -> str:
    """settled -> returned with its return (and return fee) adjustments, if the return came
    inside its window; otherwise nothing changes and the refusal is in the audit log.
    Returns "applied", "late" or "no_change"."""
    assert payout.status == states.SETTLED and payout.settled_at_us is not None
    closes_at_us = windows.closes_at_us(payout.rail, code, payout.settled_at_us)
    if returned_at_us >= closes_at_us:
        audit.record_other(
            connection,
            payout.tenant_id,
            kind="note",
            type="payout.return_refused",
            object_type="payout",
            object_id=payout.id,
            cause="return_window_closed",
            actor=actor,
            now_us=now_us,
            data={"return_code": code, "window_closed_at_us": closes_at_us},
        )
        return "late"
    moved = MACHINE.move(
        connection, payout, states.RETURNED, cause=cause, actor=actor, now_us=now_us, values={"return_code": code}
    )
    if not moved.changed:
        return "no_change"
    assert 0 < received_minor <= payout.amount_minor, "matches refuses any other amount"
    day = utc_day(returned_at_us).isoformat()  # the day the bank says the money came back
    returned = adjustments.NewAdjustment("return", received_minor, effective_on=day, code=code)
    adjustments.record(
        connection, moved.item, returned, source="bank", dedupe_key="bank:return", actor=actor, now_us=now_us
    )
    if return_fee_minor > 0:
        fee = adjustments.NewAdjustment("return_fee", return_fee_minor, effective_on=day, code=code)
        adjustments.record(
            connection, moved.item, fee, source="bank", dedupe_key="bank:return_fee", actor=actor, now_us=now_us
        )
    return "applied"
