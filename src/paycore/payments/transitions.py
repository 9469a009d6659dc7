"""Apply what the processor said to a payment: the only place a payment's status changes.

Three actors bring evidence: the API request that made the call, a webhook, and the
resolver. Each loads the payment (row-locked on PostgreSQL), decides the target state from
the evidence and the transition table, and changes it by compare-and-set, in one transaction
with the ledger posting or voiding, the audit event, and (when the payment leaves
`processing`) the response recorded for the creating request's idempotency key. Whoever
comes second finds the state already changed and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import after_commit
from paycore.idempotency import service as idempotency
from paycore.ledger import service as ledger
from paycore.payments import repository, states
from paycore.payments.errors import PaymentNotFound
from paycore.payments.schemas import HISTORY_LENGTH_MAX, creation_outcome
from paycore.payments.types import Payment, payment_from_row
from paycore.processor.port import ChargeResult

log = logging.getLogger(__name__)

EvidenceKind = Literal["result", "refused", "unreachable", "not_found"]


@dataclass(frozen=True)
class Evidence:
    """What a processor call (or webhook) established. `unreachable` and `not_found` prove
    nothing about the charge: they can only make a `processing` payment `in_doubt`."""

    kind: EvidenceKind
    result: ChargeResult | None = None
    refusal_code: str | None = None

    @classmethod
    def of_result(cls, result: ChargeResult) -> Evidence:
        return cls("result", result=result)


@dataclass(frozen=True)
class Applied:
    payment: Payment
    changed: bool
    reason: str  # why it changed or did not: "applied", "no_change", "stale", "mismatch", "lost_race"


def find(connection: Connection, tenant_id: str, payment_id: str, *, for_update: bool = False) -> Payment | None:
    row = repository.get(connection, tenant_id, payment_id, for_update=for_update)
    return None if row is None else payment_from_row(row)


def load(connection: Connection, tenant_id: str, payment_id: str, *, for_update: bool = False) -> Payment:
    payment = find(connection, tenant_id, payment_id, for_update=for_update)
    if payment is None:
        raise PaymentNotFound("no such payment", param="id")
    return payment


def target_of(current: str, evidence: Evidence) -> tuple[str | None, str | None]:
    """(target state or None to stay, failure_code)."""
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


def apply(
    connection: Connection,
    payment: Payment,
    evidence: Evidence,
    *,
    cause: str,
    actor: str,
    now_us: int,
    schedule: dict[str, Any] | None = None,
) -> Applied:
    """Move `payment` (as loaded in this transaction) to what `evidence` proves, if anything."""
    # `now_us` may have been read before this transaction got the payment's row (a lock wait,
    # SQLite's writer queue): never record a change as earlier than the change it follows.
    now_us = max(now_us, payment.updated_at_us + 1)
    target, failure_code = target_of(payment.status, evidence)
    if target is None:
        return Applied(payment, False, "no_change")
    if not states.allowed(payment.status, target):
        return Applied(payment, False, "stale" if payment.status in states.TERMINAL else "no_change")
    result = evidence.result
    if result is not None and (result.amount_minor, result.currency) != (payment.amount_minor, payment.currency):
        return Applied(payment, False, "mismatch")  # never applied: a person must look (audit event kept)
    values: dict[str, Any] = {"status": target, "updated_at_us": now_us, **(schedule or {})}
    if result is not None:
        values["processor_reference"] = result.processor_charge_id
    if target == states.FAILED:
        values["failure_code"] = failure_code
    if target == states.IN_DOUBT:
        values["in_doubt_since_us"] = now_us
    if target in states.TERMINAL:
        values.update(next_attempt_at_us=None, claimed_by=None, claimed_until_us=None)
    if not repository.change_status(connection, payment.tenant_id, payment.id, payment.status, values):
        return Applied(load(connection, payment.tenant_id, payment.id), False, "lost_race")
    if target in states.TERMINAL:
        post = target == states.SUCCEEDED
        ledger.settle_pending(connection, payment.tenant_id, payment.transfer_id, post=post, now_us=now_us)
    audit.record_state_change(
        connection,
        payment.tenant_id,
        object_type="payment",
        object_id=payment.id,
        from_state=payment.status,
        to_state=target,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data={"failure_code": failure_code} if failure_code else None,
    )
    if target == states.IN_DOUBT:
        # Written once the change has committed: never for a change rolled back, once if retried.
        after_commit(
            partial(
                log.warning,
                "payment %s is in doubt: its outcome at the processor is not known",
                payment.id,
                extra={
                    "event": "in_doubt",
                    "kind": "payment",
                    "payment_id": payment.id,
                    "tenant_id": payment.tenant_id,
                    "from_state": payment.status,
                    "cause": cause,
                },
            )
        )
    changed = load(connection, payment.tenant_id, payment.id)
    if payment.status == states.PROCESSING:
        settle_creation_response(connection, changed)
    return Applied(changed, True, "applied")


def settle_creation_response(connection: Connection, payment: Payment) -> None:
    """Record the creating request's response, unless one is recorded already."""
    history = audit.events_of(connection, payment.tenant_id, payment.id, limit=HISTORY_LENGTH_MAX)
    idempotency.complete(connection, payment.tenant_id, payment.idempotency_key, creation_outcome(payment, history))
