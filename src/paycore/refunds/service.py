"""The refund rules (SPEC §7). Every function runs in the caller's transaction.

Rule zero, "the money a customer gets back for a charge never exceeds what they paid", is
kept by `ceiling.reserve`: one conditional UPDATE of the payment row in the transaction that
inserts the refund. Every refund that is not failed or canceled holds its amount there;
failing or canceling releases it in the transaction of that change (`lifecycle`). A refund is
also a pending ledger transfer (`money.hold`: destination account -> processor clearing),
posted when the processor confirms it and voided when it fails or is canceled, so the
merchant's available balance never includes money that is on its way back to a customer.

Four eyes by sum: the same reservation returns what the payment's holding refunds add up to
with this one, and a refund waits in `requires_approval` when that passes the tenant's
threshold (`create_plan.needs_approval`), so splitting a refund in pieces never avoids a second
person. The request's rules and the refund's birth row live in `create_plan.py`, the data
plane's planner (ADR 0026), and are called from here.

Both the HTTP API and the replay entry point (`paycore.refunds.handle`) call these functions;
they differ only in how ids are made and how results are rendered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit import ids
from paycore.kit.errors import InvalidStartingAfter
from paycore.lifecycle import recording
from paycore.lifecycle.machine import Machine
from paycore.operators import service as operators
from paycore.payments import service as payments
from paycore.payments.errors import PaymentNotFound
from paycore.refunds import ceiling, create_plan, lifecycle, money, repository, states
from paycore.refunds.errors import OverRefund, PaymentNotCaptured, PaymentNotRefundable, RefundStateConflict
from paycore.refunds.types import Refund, Totals, refund_from_row

HISTORY_LENGTH_MAX = 100


@dataclass(frozen=True)
class NewRefund:
    payment_id: str
    amount_minor: int
    reason: str | None = None
    idempotency_key: str | None = None
    # The tenant's threshold (`needs_approval`): a refund whose payment's refunds, this one
    # included, add up to more than it waits in requires_approval for a person; None: never.
    approval_threshold_minor: int | None = None


# The refund's lifecycle, the one home of reading refunds by id and by status (`load`, `find`,
# `find_many`, `moved_between`, `search`, `summary`, `working_since_us`, `in_doubt_summary`):
# other domains and the console call `refunds.MACHINE.find(...)`, as every status change goes
# through it.
MACHINE: Final[Machine[Refund]] = lifecycle.MACHINE


def new_refund_id() -> str:
    return ids.new_id("rf")


def create_refund(
    connection: Connection,
    tenant_id: str,
    new: NewRefund,
    *,
    now_us: int,
    actor: str,
    new_id: Callable[[], str] = new_refund_id,
) -> Refund:
    """Reserve the amount on the payment, then store the refund and its pending transfer.
    Refusals: PaymentNotFound, PaymentNotRefundable (not succeeded), OverRefund (nothing stored)."""
    create_plan.check_amount(new.amount_minor)
    payment = ceiling.reserve(connection, tenant_id, new.payment_id, new.amount_minor)
    if payment is None:  # why not: read it (nothing was written)
        current = payments.MACHINE.find(connection, tenant_id, new.payment_id)
        if current is None:
            raise PaymentNotFound("no such payment", param="payment_id")
        if current.is_manual and current.status not in (ceiling.REFUNDABLE_STATUS, "failed"):
            raise PaymentNotCaptured(
                f"the payment is {current.status}: only captured money can be refunded", status=current.status
            )
        if current.status != ceiling.REFUNDABLE_STATUS:
            raise PaymentNotRefundable(
                f"the payment is {current.status}; only a succeeded payment can be refunded", status=current.status
            )
        refundable = max(payments.captured_minor(current) - current.refunded_minor - current.disputed_minor, 0)
        raise OverRefund(
            f"the refunds of this payment would exceed what was paid: {refundable} minor units are refundable",
            param="amount_minor",
            refundable_minor=refundable,
        )
    refund_id = new_id()
    waits = create_plan.needs_approval(payment.refunded_minor, new.approval_threshold_minor)
    transfer_id = money.hold(connection, payment, refund_id, new.amount_minor, now_us=now_us)
    refund = create_plan.new_refund(
        None,
        tenant_id,
        refund_id,
        payment_id=new.payment_id,
        amount_minor=new.amount_minor,
        currency=payment.currency,
        reason=new.reason,
        status=states.REQUIRES_APPROVAL if waits else states.PENDING,
        transfer_id=transfer_id,
        now_us=now_us,
        idempotency_key=new.idempotency_key,
    )
    recording.create(connection, lifecycle.MACHINE, refund, cause=create_plan.CAUSE, actor=actor)
    return refund  # what was inserted: no re-read


def approve(connection: Connection, tenant_id: str, refund_id: str, *, actor: str, now_us: int) -> Refund:
    """requires_approval -> pending (due for the worker at once), by a person (four eyes):
    `actor` is an operator (the console checks their role) other than the one who asked for
    the refund, or local mode's one developer. OperatorRequired for anyone else (an API key, a
    worker), SamePerson for the requester. From any other status this is a RefundStateConflict
    carrying the current status: a refund that never needed approval, or has moved on since
    (sent, settled, canceled), was not approved by this request."""
    refund = lifecycle.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
    operators.four_eyes(actor, requested_by(connection, refund), what="approving a refund")
    if refund.status != states.REQUIRES_APPROVAL:
        raise RefundStateConflict(
            f"the refund is {refund.status}; only a refund awaiting approval can be approved", status=refund.status
        )
    schedule = {"next_attempt_at_us": now_us}
    return lifecycle.move(
        connection, refund, states.PENDING, cause="approved", actor=actor, now_us=now_us, values=schedule
    ).item


def cancel(connection: Connection, tenant_id: str, refund_id: str, *, actor: str, now_us: int) -> Refund:
    """requires_approval -> canceled (amount released, hold voided). Canceling again is a no-op;
    a refund already approved cannot be canceled any more."""
    refund = lifecycle.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
    if refund.status == states.REQUIRES_APPROVAL:
        return lifecycle.move(connection, refund, states.CANCELED, cause="canceled", actor=actor, now_us=now_us).item
    if refund.status == states.CANCELED:
        return refund
    raise RefundStateConflict(
        f"the refund is {refund.status}; only a refund awaiting approval can be canceled", status=refund.status
    )


def requested_by(connection: Connection, refund: Refund) -> str:
    """Who asked for the refund: the actor of its birth event."""
    birth = audit.first_state_change(connection, refund.tenant_id, refund.id)
    assert birth is not None, "a refund is stored with its birth event"
    return birth.actor


def of_payment(
    connection: Connection, tenant_id: str, payment_id: str, *, starting_after: str | None, limit: int
) -> list[Refund]:
    """Oldest first. `starting_after` is a refund of this payment; anything else is refused."""
    if starting_after is not None and repository.payment_of(connection, tenant_id, starting_after) != payment_id:
        raise InvalidStartingAfter("starting_after is not a refund of this payment", param="starting_after")
    rows = repository.of_payment(connection, tenant_id, payment_id, starting_after=starting_after, limit=limit)
    return [refund_from_row(row._mapping) for row in rows]


def page(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Refund]:
    """The tenant's refunds, oldest first, in `status` if given (`in_doubt`: the ones awaiting
    the processor's word). `starting_after` is a refund of the tenant, whatever its status now."""
    if starting_after is not None and repository.payment_of(connection, tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a refund of this tenant", param="starting_after")
    rows = repository.page(connection, tenant_id, status=status, starting_after=starting_after, limit=limit)
    return [refund_from_row(row._mapping) for row in rows]


def totals(connection: Connection, tenant_id: str, payment_id: str) -> Totals:
    payment = payments.MACHINE.find(connection, tenant_id, payment_id)
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


# What the processor said (a webhook, a report line), or a person (a confirmed manual
# resolution), applied through the refund's lifecycle: the one entry for evidence every money
# domain's service has by this name, since reconciliation and manual resolution call it
# without knowing the kind (a refund adds nothing to its machine's).
apply_evidence: Final = lifecycle.MACHINE.apply_evidence


def record_result(connection: Connection, tenant_id: str, refund_id: str, to_state: str, *, actor: str) -> Refund:
    """A result the processor gave for a refund still `pending` (the replay entry point of SPEC
    §7.2 settles refunds this way): pending -> succeeded | failed, at the refund's own time
    (the move's clock never goes back: one microsecond after it). RefundStateConflict otherwise."""
    refund = lifecycle.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
    if refund.status != states.PENDING:
        raise RefundStateConflict(f"the refund is {refund.status}, not pending", status=refund.status)
    cause = "processor_succeeded" if to_state == states.SUCCEEDED else "processor_failed"
    applied = lifecycle.move(connection, refund, to_state, cause=cause, actor=actor, now_us=refund.created_at_us)
    assert applied.changed and applied.item.status == to_state, applied
    return applied.item
