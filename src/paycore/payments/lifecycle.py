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
`pending` (`paycore.lifecycle.work`). Nothing else ever makes a payment `in_doubt`, and only
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
from paycore.lifecycle.evidence import MANUAL_FAILURE_CODE, Applied, Decision, Evidence
from paycore.lifecycle.machine import Machine
from paycore.payments import states
from paycore.payments.errors import PaymentNotFound
from paycore.payments.models import payments
from paycore.payments.schemas import HISTORY_LENGTH_MAX, creation_outcome, payment_object
from paycore.payments.types import Payment, payment_from_row, payment_row
from paycore.processor.port import ChargeResult


def target_of(current: str, evidence: Evidence[Any]) -> tuple[str | None, str | None]:
    """(target state or None to stay, failure_code)."""
    if evidence.kind == "manual":
        return (states.SUCCEEDED, None) if evidence.outcome == "succeeded" else (states.FAILED, MANUAL_FAILURE_CODE)
    if evidence.kind == "result":
        assert evidence.result is not None
        if evidence.result.status == "succeeded":
            return states.SUCCEEDED, None
        if evidence.result.status == "failed":
            return states.FAILED, evidence.result.failure_code or "processor_failed"
        return None, None  # pending: the processor has it; the answer comes later
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
    if failure_code is not None:
        values["failure_code"] = failure_code
        return Decision((target,), values, {"failure_code": failure_code})
    return Decision((target,), values)


def matches(payment: Payment, result: ChargeResult) -> bool:
    return (result.amount_minor, result.currency) == (payment.amount_minor, payment.currency)


def _effect(connection: Connection, payment: Payment, to_state: str, now_us: int) -> None:
    """Post the pending transfer (processor clearing -> destination) on success, void it on failure."""
    if to_state in states.TERMINAL:
        post = to_state == states.SUCCEEDED
        ledger.settle_pending(
            connection, payment.tenant_id, payment.transfer_id, post=post, now_us=now_us, owner_id=payment.id
        )


MACHINE: Machine[Payment] = Machine(
    object_type="payment",
    table=payments,
    states=states,
    from_row=payment_from_row,
    to_row=payment_row,
    not_found=partial(PaymentNotFound, "no such payment", param="id"),
    effect=_effect,
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
    a payment leaving `processing` settles its creating request's answer."""
    applied = MACHINE.apply_evidence(
        connection, payment, evidence, cause=cause, actor=actor, now_us=now_us, values=values, data=data
    )
    if applied.changed and payment.status == states.PROCESSING:
        settle_creation_response(connection, applied.item)
    return applied


def settle_creation_response(connection: Connection, payment: Payment) -> Outcome | None:
    """Record the creating request's response, unless one is recorded already. Returns the
    response recorded now, or None when one was recorded before."""
    history = audit.events_of(connection, payment.tenant_id, payment.id, limit=HISTORY_LENGTH_MAX)
    outcome = creation_outcome(payment, history)
    return outcome if idempotency.complete(connection, payment.tenant_id, payment.idempotency_key, outcome) else None
