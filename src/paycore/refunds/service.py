"""The refund rules (SPEC §7). Every function runs in the caller's transaction.

Rule zero, "the money a customer gets back for a charge never exceeds what they paid", is
kept by `charges.reserve`: one conditional UPDATE of the payment row in the transaction that
inserts the refund. Every refund that is not failed or canceled holds its amount there;
failing or canceling releases it in the transaction of that change. A refund is also a
pending ledger transfer (destination account -> processor clearing), posted when the
processor confirms it and voided when it fails or is canceled, so the merchant's available
balance never includes money that is on its way back to a customer.

Both the HTTP API and the replay entry point (`paycore.refunds.handle`) call these functions;
they differ only in how ids are made and how results are rendered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import after_commit
from paycore.kit import ids
from paycore.kit.errors import InvalidAmount, InvalidStartingAfter
from paycore.kit.money import is_amount_minor
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payments.errors import PaymentNotFound
from paycore.refunds import charges, repository, states
from paycore.refunds.errors import OverRefund, PaymentNotRefundable, RefundNotFound, RefundStateConflict
from paycore.refunds.types import Refund, Totals, refund_from_row

log = logging.getLogger(__name__)

HISTORY_LENGTH_MAX = 100


@dataclass(frozen=True)
class NewRefund:
    payment_id: str
    amount_minor: int
    reason: str | None = None
    idempotency_key: str | None = None
    # Refunds above this amount wait in requires_approval for a person; None: never.
    approval_threshold_minor: int | None = None


@dataclass(frozen=True)
class Applied:
    refund: Refund
    changed: bool


def new_refund_id() -> str:
    return ids.new_id("rf")


def create_refund(
    connection: Connection,
    tenant_id: str,
    new: NewRefund,
    *,
    now_us: int,
    new_id: Callable[[], str] = new_refund_id,
    actor: str = "api",
) -> Refund:
    """Reserve the amount on the payment, then store the refund and its pending transfer.
    Refusals: PaymentNotFound, PaymentNotRefundable (not succeeded), OverRefund (nothing stored)."""
    if not is_amount_minor(new.amount_minor):
        raise InvalidAmount("amount_minor must be a positive integer up to 2^53 - 1", param="amount_minor")
    payment = charges.get(connection, tenant_id, new.payment_id)
    if payment is None:
        raise PaymentNotFound("no such payment", param="payment_id")
    if payment.status != "succeeded":
        raise PaymentNotRefundable(
            f"the payment is {payment.status}; only a succeeded payment can be refunded", status=payment.status
        )
    if not charges.reserve(connection, tenant_id, new.payment_id, new.amount_minor):
        current = charges.get(connection, tenant_id, new.payment_id)
        assert current is not None
        refundable = current.amount_minor - current.refunded_minor
        raise OverRefund(
            f"the refunds of this payment would exceed what was paid: {refundable} minor units are refundable",
            param="amount_minor",
            refundable_minor=refundable,
        )
    refund_id = new_id()
    threshold = new.approval_threshold_minor
    status = states.REQUIRES_APPROVAL if threshold is not None and new.amount_minor > threshold else states.PENDING
    transfer_id = _hold(connection, tenant_id, payment, refund_id, new.amount_minor, now_us)
    repository.add(
        connection,
        {
            "tenant_id": tenant_id,
            "id": refund_id,
            "payment_id": new.payment_id,
            "idempotency_key": new.idempotency_key,
            "amount_minor": new.amount_minor,
            "currency": payment.currency,
            "reason": new.reason,
            "status": status,
            "failure_code": None,
            "processor_request_id": refund_id,  # stable: every call about this refund sends it
            "processor_reference": None,
            "transfer_id": transfer_id,
            "resolve_attempts": 0,
            "next_attempt_at_us": now_us if status == states.PENDING else None,
            "claimed_by": None,
            "claimed_until_us": None,
            "in_doubt_since_us": None,
            "created_at_us": now_us,
            "updated_at_us": now_us,
        },
    )
    _record(connection, tenant_id, refund_id, None, status, cause="refund_requested", actor=actor, now_us=now_us)
    return load(connection, tenant_id, refund_id)


def _hold(connection: Connection, tenant_id: str, payment: Any, refund_id: str, amount_minor: int, now_us: int) -> str:
    """The refund's pending ledger transfer: destination account -> processor clearing."""
    clearing = ledger.find_account_by_code(connection, tenant_id, f"processor.clearing.{payment.currency}")
    assert clearing is not None, "a succeeded payment's clearing account exists"
    spec = TransferSpec(
        entries=(
            EntrySpec(payment.destination_account_id, "debit", amount_minor),
            EntrySpec(clearing.id, "credit", amount_minor),
        ),
        pending=True,
        currency=payment.currency,
        reference_type="refund",
        reference_id=refund_id,
    )
    return ledger.create_transfer(connection, tenant_id, spec, now_us=now_us).id


def apply(
    connection: Connection,
    refund: Refund,
    to_state: str,
    *,
    cause: str,
    actor: str,
    now_us: int,
    failure_code: str | None = None,
    processor_reference: str | None = None,
    schedule: dict[str, Any] | None = None,
) -> Applied:
    """Move `refund` (as loaded in this transaction) to `to_state` if the table allows it:
    compare-and-set, ledger post or void, reservation released, audit event, one transaction."""
    if not states.allowed(refund.status, to_state):
        return Applied(refund, False)
    now_us = max(now_us, refund.updated_at_us + 1)  # never before the change it follows
    values: dict[str, Any] = {"status": to_state, "updated_at_us": now_us, **(schedule or {})}
    if processor_reference is not None:
        values["processor_reference"] = processor_reference
    if to_state == states.FAILED:
        values["failure_code"] = failure_code or "refund_failed"
    if to_state == states.IN_DOUBT:
        values["in_doubt_since_us"] = now_us
    if to_state in states.TERMINAL:
        values.update(next_attempt_at_us=None, claimed_by=None, claimed_until_us=None)
    if not repository.change_status(connection, refund.tenant_id, refund.id, refund.status, values):
        return Applied(load(connection, refund.tenant_id, refund.id), False)
    # The payment row before the ledger's account rows, in the order create_refund locks them:
    # the other order deadlocks on PostgreSQL with a refund created meanwhile.
    if to_state in states.RELEASED:
        charges.release(connection, refund.tenant_id, refund.payment_id, refund.amount_minor)
    if to_state in states.TERMINAL and refund.transfer_id is not None:
        post = to_state == states.SUCCEEDED
        ledger.settle_pending(connection, refund.tenant_id, refund.transfer_id, post=post, now_us=now_us)
    data = {"failure_code": values["failure_code"]} if to_state == states.FAILED else None
    _record(connection, refund.tenant_id, refund.id, refund.status, to_state, cause, actor, now_us, data)
    if to_state == states.IN_DOUBT:
        # Written once the change has committed: never for a change rolled back, once if retried.
        after_commit(
            partial(
                log.warning,
                "refund %s is in doubt: its outcome at the processor is not known",
                refund.id,
                extra={
                    "event": "in_doubt",
                    "kind": "refund",
                    "refund_id": refund.id,
                    "tenant_id": refund.tenant_id,
                    "payment_id": refund.payment_id,
                    "from_state": refund.status,
                    "cause": cause,
                },
            )
        )
    return Applied(load(connection, refund.tenant_id, refund.id), True)


def approve(connection: Connection, tenant_id: str, refund_id: str, *, actor: str, now_us: int) -> Refund:
    """requires_approval -> pending (due for the worker at once). From any other status this
    is a RefundStateConflict carrying the current status: a refund that never needed approval,
    or has moved on since (sent, settled, canceled), was not approved by this request."""
    refund = load(connection, tenant_id, refund_id, for_update=True)
    if refund.status != states.REQUIRES_APPROVAL:
        raise RefundStateConflict(
            f"the refund is {refund.status}; only a refund awaiting approval can be approved", status=refund.status
        )
    schedule = {"next_attempt_at_us": now_us}
    return apply(
        connection, refund, states.PENDING, cause="approved", actor=actor, now_us=now_us, schedule=schedule
    ).refund


def cancel(connection: Connection, tenant_id: str, refund_id: str, *, actor: str, now_us: int) -> Refund:
    """requires_approval -> canceled (amount released, hold voided). Canceling again is a no-op;
    a refund already approved cannot be canceled any more."""
    refund = load(connection, tenant_id, refund_id, for_update=True)
    if refund.status == states.REQUIRES_APPROVAL:
        return apply(connection, refund, states.CANCELED, cause="canceled", actor=actor, now_us=now_us).refund
    if refund.status == states.CANCELED:
        return refund
    raise RefundStateConflict(
        f"the refund is {refund.status}; only a refund awaiting approval can be canceled", status=refund.status
    )


def find(connection: Connection, tenant_id: str, refund_id: str, *, for_update: bool = False) -> Refund | None:
    row = repository.get(connection, tenant_id, refund_id, for_update=for_update)
    return None if row is None else refund_from_row(row)


def load(connection: Connection, tenant_id: str, refund_id: str, *, for_update: bool = False) -> Refund:
    refund = find(connection, tenant_id, refund_id, for_update=for_update)
    if refund is None:
        raise RefundNotFound("no such refund", param="id")
    return refund


def of_payment(
    connection: Connection, tenant_id: str, payment_id: str, *, starting_after: str | None, limit: int
) -> list[Refund]:
    """Oldest first. `starting_after` is a refund of this payment; anything else is refused."""
    if starting_after is not None:
        after = repository.get(connection, tenant_id, starting_after)
        if after is None or after.payment_id != payment_id:
            raise InvalidStartingAfter("starting_after is not a refund of this payment", param="starting_after")
    rows = repository.of_payment(connection, tenant_id, payment_id, starting_after=starting_after, limit=limit)
    return [refund_from_row(row) for row in rows]


def totals(connection: Connection, tenant_id: str, payment_id: str) -> Totals:
    payment = charges.get(connection, tenant_id, payment_id)
    if payment is None:
        raise PaymentNotFound("no such payment", param="payment_id")
    by_status = repository.totals_by_status(connection, tenant_id, payment_id)
    succeeded = by_status.get(states.SUCCEEDED, 0)
    released = sum(by_status.get(status, 0) for status in states.RELEASED)
    held = sum(by_status.values()) - succeeded - released
    return Totals(
        amount_minor=payment.amount_minor, pending_minor=held, succeeded_minor=succeeded, failed_minor=released
    )


def history(connection: Connection, refund: Refund) -> list[audit.Event]:
    return audit.events_of(connection, refund.tenant_id, refund.id, limit=HISTORY_LENGTH_MAX)


def _record(
    connection: Connection,
    tenant_id: str,
    refund_id: str,
    from_state: str | None,
    to_state: str,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
) -> None:
    audit.record_state_change(
        connection,
        tenant_id,
        object_type="refund",
        object_id=refund_id,
        from_state=from_state,
        to_state=to_state,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data,
    )
