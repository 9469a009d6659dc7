"""The only place a payment's status changes (SPEC §6, §10): the payment's machine for the one
lifecycle (`paycore.lifecycle`), and what the processor's evidence proves.

Three actors bring evidence: the API request that made the call, a webhook, and the
resolver (and, with reconciliation, a settlement report). Each loads the payment (row-locked
on PostgreSQL) and applies the evidence: the target state comes from `target_of` and the
transition table, and the change is a compare-and-set, in one transaction with the ledger
posting or voiding, the audit event, and (when the payment leaves `processing`) the response
recorded for the creating request's idempotency key. Whoever comes second finds the state
already changed and changes nothing.

When a payment becomes `in_doubt`: only when it was `processing` (a call may be in flight)
and the processor gave no usable answer (`unreachable`) or has no record of it
(`not_found`), or when the resolver runs out of rounds while the processor still says
`pending` (`paycore.in_doubt.resolver`). Nothing else ever makes a payment `in_doubt`, and only
the processor's evidence ever takes it out.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import Outcome
from paycore.ledger import service as ledger
from paycore.lifecycle.columns import UNSCHEDULED
from paycore.lifecycle.evidence import MANUAL_FAILURE_CODE, Applied, Decision, Evidence
from paycore.lifecycle.machine import Machine
from paycore.payments import states
from paycore.payments.errors import PaymentNotFound
from paycore.payments.models import payments
from paycore.payments.schemas import HISTORY_LENGTH_MAX, creation_outcome, operation_outcome, payment_object
from paycore.payments.types import Payment, payment_from_row, payment_row
from paycore.processor.port import ChargeResult

# What a manual charge's status at the processor proves (SPEC §6.1); an automatic charge says
# `succeeded`, `failed` or `pending` (no target: the answer comes later).
_TARGET_OF_STATUS = {
    "succeeded": states.SUCCEEDED,
    "failed": states.FAILED,
    "requires_capture": states.REQUIRES_CAPTURE,
    "captured": states.SUCCEEDED,
    "canceled": states.CANCELED,
    "expired": states.CANCELED,
}


def state_proved(charge_status: str) -> str | None:
    """The payment's status a charge's status at the processor proves (None: `pending`)."""
    return _TARGET_OF_STATUS.get(charge_status)


def target_of(current: str, evidence: Evidence[Any]) -> tuple[str | None, str | None]:
    """(target state or None to stay, failure_code)."""
    if evidence.kind == "manual":
        return (states.SUCCEEDED, None) if evidence.outcome == "succeeded" else (states.FAILED, MANUAL_FAILURE_CODE)
    if evidence.kind == "result":
        assert evidence.result is not None
        target = _TARGET_OF_STATUS.get(evidence.result.status)
        if target == states.FAILED:
            return states.FAILED, evidence.result.failure_code or "processor_failed"
        return target, None  # None: pending, the processor has it; the answer comes later
    if evidence.kind == "refused":
        return states.FAILED, evidence.refusal_code or "processor_refused"
    return (states.IN_DOUBT, None) if current == states.PROCESSING else (None, None)


def decide(current: str, evidence: Evidence[Any]) -> Decision:
    target, failure_code = target_of(current, evidence)
    if target is None:
        return Decision()
    values: dict[str, Any] = {}
    result = evidence.result
    if isinstance(result, ChargeResult):
        values["processor_reference"] = result.processor_charge_id
        if result.capture == "manual":
            values.update(authorization_values(result))
    if failure_code is not None:
        values["failure_code"] = failure_code
        return Decision((target,), values, {"failure_code": failure_code})
    return Decision((target,), values)


def authorization_values(result: ChargeResult) -> dict[str, Any]:
    """A manual payment's columns as the processor's charge says them now."""
    values: dict[str, Any] = {}
    if result.status == "requires_capture":
        assert result.amount_capturable_minor is not None and result.authorization_expires_at_us is not None
        values["amount_capturable_minor"] = result.amount_capturable_minor
        values["amount_captured_minor"] = 0
        values["authorization_expires_at_us"] = result.authorization_expires_at_us
    elif result.status == "captured":
        assert result.amount_captured_minor is not None and 0 < result.amount_captured_minor <= result.amount_minor
        values["amount_capturable_minor"] = 0
        values["amount_captured_minor"] = result.amount_captured_minor
    elif result.status in ("canceled", "expired"):
        values["amount_capturable_minor"] = 0
        values["amount_captured_minor"] = 0
        values["cancellation_reason"] = states.EXPIRED if result.status == "expired" else states.REQUESTED
    if result.authorization_expires_at_us is not None:
        values["authorization_expires_at_us"] = result.authorization_expires_at_us
    return values


def matches(payment: Payment, result: ChargeResult) -> bool:
    return (result.amount_minor, result.currency) == (payment.amount_minor, payment.currency)


def _effect(connection: Connection, payment: Payment, to_state: str, now_us: int) -> None:
    """Post the pending transfer (processor clearing -> destination) on success, void it on failure
    or cancel. A manual payment's success posts what was captured and releases the rest, in one
    step (SPEC §6.1): the amount is the one this move wrote, read back in its transaction."""
    if to_state not in states.TERMINAL:
        return
    post = to_state == states.SUCCEEDED
    amount_minor = None
    if post and payment.is_manual:
        moved = MACHINE.load(connection, payment.tenant_id, payment.id)
        # A person's confirmed word (manual resolution) carries no amount: what was asked for.
        amount_minor = moved.amount_captured_minor or moved.capture_requested_minor
        assert amount_minor is None or 0 < amount_minor <= payment.amount_minor, moved
    ledger.settle_pending(
        connection,
        payment.tenant_id,
        payment.transfer_id,
        post=post,
        now_us=now_us,
        owner_id=payment.id,
        amount_minor=amount_minor,
    )


def _columns_of(to_state: str, now_us: int) -> dict[str, Any]:
    """An open authorization waits for its merchant, not for a worker: nothing is due."""
    return dict(UNSCHEDULED) if to_state == states.REQUIRES_CAPTURE else {}


MACHINE: Machine[Payment] = Machine(
    object_type="payment",
    table=payments,
    states=states,
    from_row=payment_from_row,
    to_row=payment_row,
    not_found=partial(PaymentNotFound, "no such payment", param="id"),
    effect=_effect,
    columns_of=_columns_of,
    decide=decide,
    matches=matches,
    snapshot=payment_object,
    references=("processor_reference", "idempotency_key"),
)


def apply_evidence(
    connection: Connection,
    payment: Payment,
    evidence: Evidence[Any],
    *,
    cause: str,
    actor: str,
    now_us: int,
    values: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> Applied[Payment]:
    """Move `payment` (as loaded in this transaction) to what `evidence` proves, if anything;
    a payment leaving `processing` settles its creating request's answer, and a payment whose
    capture or cancel is settled settles that request's answer (`operations.py`)."""
    if payment.operation is not None and payment.status in states.UNRESOLVED:
        early = _operation_not_done(connection, payment, evidence, cause=cause, actor=actor, now_us=now_us)
        if early is not None:
            return early
    applied = MACHINE.apply_evidence(
        connection, payment, evidence, cause=cause, actor=actor, now_us=now_us, values=values, data=data
    )
    if applied.changed and payment.status == states.PROCESSING and payment.operation is None:
        settle_creation_response(connection, applied.item)
    if applied.changed and payment.operation is not None and applied.item.status != states.PROCESSING:
        settle_operation_response(connection, applied.item)  # in_doubt too: 202, as a creation's
    return applied


def _operation_not_done(
    connection: Connection, payment: Payment, evidence: Evidence[Any], *, cause: str, actor: str, now_us: int
) -> Applied[Payment] | None:
    """Evidence that a capture or cancel in flight did not happen: the processor refused it (it
    did nothing: the authorization is open again, the request answered), or says the charge is
    still authorized (the call has not arrived: nothing changes, the resolver sends it again).
    None for any other evidence, which the machine applies."""
    if evidence.kind == "refused":
        back = {"operation": None, "capture_requested_minor": None}
        moved = MACHINE.move(
            connection,
            payment,
            states.REQUIRES_CAPTURE,
            cause=cause,
            actor=actor,
            now_us=now_us,
            values=back,
            data={"refusal_code": evidence.refusal_code, "operation": payment.operation},
        )
        if moved.changed:
            settle_operation_response(connection, moved.item, refused_by=payment.operation)
        return moved
    result = evidence.result
    if isinstance(result, ChargeResult) and result.status == "requires_capture":
        return Applied(payment, False, "no_change")
    return None


def settle_creation_response(connection: Connection, payment: Payment) -> Outcome | None:
    """Record the creating request's response, unless one is recorded already. Returns the
    response recorded now, or None when one was recorded before."""
    history = audit.events_of(connection, payment.tenant_id, payment.id, limit=HISTORY_LENGTH_MAX)
    outcome = creation_outcome(payment, history)
    return outcome if idempotency.complete(connection, payment.tenant_id, payment.idempotency_key, outcome) else None


def settle_operation_response(connection: Connection, payment: Payment, *, refused_by: str | None = None) -> None:
    """Record the answer of the request that sent the payment's capture or cancel, unless one
    is recorded already: whoever settles the call's outcome first (that request, a webhook, the
    resolver) writes it, in the same transaction."""
    key = payment.operation_idempotency_key
    assert key is not None, "a payment with an operation in flight has its request's key"
    idempotency.complete(connection, payment.tenant_id, key, operation_outcome(payment, refused_by=refused_by))
