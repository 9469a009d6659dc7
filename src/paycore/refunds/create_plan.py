"""A refund's creating phase, planned (ADR 0026 step 3): pure functions from the request to the
rows to write.

In: the request (its key's scope: tenant, key, fingerprint, the clock's `now_us`; the payment,
the amount, the reason; who asks), the payment's immutable facts (currency, the account it
credited), the processor clearing account's id if this process has seen it, the event's
context (the request id), the new ids, and `render` (the answer's body, as the reference path
stores it). Out: a `Plan` holding every row the phase writes, exactly as the reference path
(`service.create_refund` inside `idempotency.run`) writes them for a refund that needs no
approval: the key claimed with its answer, the ceiling's reservation (the amount the write adds
to the payment's `refunded_minor`, under the checks of `ceiling.reserve` and `needs_approval`),
the hold (a pending transfer: the destination debited, the processor clearing account credited)
with its two entries and each account's pending deltas, the refund `pending` (due at once) and
its birth event with its snapshot. The answer (`Plan.answer`) is built here from the refund and
the event the plan writes, never read back: a refund just created has that one event.

The rules of a refund's request live here, once: the amount's (`check_amount`) and four eyes by
sum (`needs_approval`); `service.create_refund` calls them. The rows are made by their one home
each: the refund by `new_refund`, the hold by `money.hold_spec`, `ledger.transfer_values` and
`ledger.entry_totals`, the event by `lifecycle.recording.event_row`, the key by `KeyScope.row`.
A refund that needs approval is never planned: the write refuses it (its copy of
`needs_approval`, beside the ceiling's) and the reference path stores it `requires_approval`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paycore.audit.rows import EventContext
from paycore.audit.service import Event
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.errors import InvalidAmount
from paycore.kit.money import AMOUNT_MINOR_MAX, is_amount_minor
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.limits import Totals
from paycore.lifecycle import columns, recording
from paycore.refunds import lifecycle, money, states
from paycore.refunds.types import Refund, refund_row

CAUSE = "refund_requested"  # the cause of a refund's birth event
STATUS_CREATED = 201
Render = Callable[[Refund, list[Event]], str]  # the answer's body: the refund and its history


def check_amount(amount_minor: int) -> None:
    """A refund's amount: a positive integer up to 2^53 - 1 (a bad request: not recorded)."""
    if not is_amount_minor(amount_minor):
        raise InvalidAmount("amount_minor must be a positive integer up to 2^53 - 1", param="amount_minor")


def needs_approval(refunded_minor: int, threshold_minor: int | None) -> bool:
    """Four eyes by sum: a refund waits for a person when the payment's refunds that hold their
    amount (every one not failed or canceled, this one included: `refunded_minor`, as the
    ceiling's reservation left it) add up to more than the tenant's threshold. The sum comes
    from the same atomic UPDATE that reserved this refund, so two refunds made at once in any
    processes are serialised on the payment row, and the second sees the first. Copied, as a
    condition of that UPDATE, by the data plane's write (`create_repository.py`, and
    `paycore_refunds_create` in its migration); `test_create_data_plane.py` holds the copies to
    this rule around the threshold."""
    return threshold_minor is not None and refunded_minor > threshold_minor


def new_refund(
    scope: KeyScope | None,
    tenant_id: str,
    refund_id: str,
    *,
    payment_id: str,
    amount_minor: int,
    currency: str,
    reason: str | None,
    status: str,
    transfer_id: str,
    now_us: int,
    idempotency_key: str | None,
) -> Refund:
    """The refund as it is stored at its birth (`pending`, due at once; or `requires_approval`)."""
    assert scope is None or (scope.tenant_id, scope.key) == (tenant_id, idempotency_key)
    assert status in (states.PENDING, states.REQUIRES_APPROVAL), status
    return Refund(
        tenant_id=tenant_id,
        id=refund_id,
        payment_id=payment_id,
        idempotency_key=idempotency_key,
        amount_minor=amount_minor,
        currency=currency,
        reason=reason,
        status=status,
        failure_code=None,
        processor_request_id=refund_id,  # stable: every call about this refund sends it
        processor_reference=None,
        transfer_id=transfer_id,
        **columns.fresh(next_attempt_at_us=now_us if status == states.PENDING else None),
        created_at_us=now_us,
        updated_at_us=now_us,
    )


@dataclass(frozen=True)
class RefundRequest:
    """A request that passed the HTTP edge (shapes, key), before the refund's own rules."""

    payment_id: str
    amount_minor: int
    reason: str | None
    actor: str


@dataclass(frozen=True)
class PaymentFacts:
    """What never changes of a payment, and all the plan needs of it: the write checks them
    against the row its reservation returns."""

    currency: str
    destination_account_id: str


@dataclass(frozen=True)
class NewIds:
    refund_id: str
    transfer_id: str
    debit_entry_id: str
    credit_entry_id: str
    event_id: str


@dataclass(frozen=True)
class PlannedEntry:
    """One entry of the hold, with what it adds to its account's totals (pending only)."""

    id: str
    account_id: str  # the clearing account's: as cached, or "" where unknown (the write finds it)
    direction: str
    amount_minor: int
    delta: Totals


@dataclass(frozen=True)
class Plan:
    refund: Refund  # what the phase stores, and the answer's
    answer: Outcome
    key_row: dict[str, Any]  # the key's row, claimed with its answer
    clearing_code: str
    transfer_row: dict[str, Any]
    # the destination debited, then the processor clearing account credited: the order of the
    # transfer's entries on the reference path (`money.hold`).
    entries: tuple[PlannedEntry, PlannedEntry]
    refund_row: dict[str, Any]
    event_row: dict[str, Any]

    @property
    def tenant_id(self) -> str:
        return self.refund.tenant_id

    @property
    def destination_entry(self) -> PlannedEntry:
        return self.entries[0]

    @property
    def clearing_entry(self) -> PlannedEntry:
        return self.entries[1]


def plan_create(
    scope: KeyScope,
    request: RefundRequest,
    payment: PaymentFacts,
    *,
    clearing_account_id: str | None,
    context: EventContext,
    new_ids: NewIds,
    render: Render,
) -> Plan:
    """The rows of one refund (`pending`) and its answer. Raises the request's refusal, as the
    reference path does. `clearing_account_id`: the tenant's clearing account of the payment's
    currency as this process last saw it, or None (PostgreSQL's call finds it by its code)."""
    assert scope.expires_at_us is None, "a refund's key is kept forever (SPEC §3.1)"
    check_amount(request.amount_minor)
    now_us, refund_id = scope.now_us, new_ids.refund_id
    refund = new_refund(
        scope,
        scope.tenant_id,
        refund_id,
        payment_id=request.payment_id,
        amount_minor=request.amount_minor,
        currency=payment.currency,
        reason=request.reason,
        status=states.PENDING,
        transfer_id=new_ids.transfer_id,
        now_us=now_us,
        idempotency_key=scope.key,
    )
    spec = money.hold_spec(
        payment.currency, payment.destination_account_id, refund_id, request.amount_minor, clearing_account_id or ""
    )
    deltas, _ = ledger.entry_totals(spec.entries, pending=True)
    entry_ids = (new_ids.debit_entry_id, new_ids.credit_entry_id)
    entries = tuple(
        PlannedEntry(entry_id, entry.account_id, entry.direction, entry.amount_minor, deltas[entry.account_id])
        for entry_id, entry in zip(entry_ids, spec.entries, strict=True)
    )
    event = recording.event_row(
        lifecycle.MACHINE,
        refund,
        None,
        cause=CAUSE,
        actor=request.actor,
        now_us=refund.updated_at_us,
        data=None,
        event_id=new_ids.event_id,
        context=context,
    )
    answer = Outcome(STATUS_CREATED, render(refund, [birth_event(event)]))
    plan = Plan(
        refund=refund,
        answer=answer,
        key_row=scope.row(answer),
        clearing_code=chart.processor_clearing(payment.currency),
        transfer_row=ledger.transfer_values(
            scope.tenant_id, new_ids.transfer_id, "pending", spec, now_us, idempotency_key=None, batch_id=None
        ),
        entries=(entries[0], entries[1]),
        refund_row=refund_row(refund),
        event_row=event,
    )
    _check_plan(plan, payment)
    return plan


def birth_event(row: dict[str, Any]) -> Event:
    """The event `row` (as `audit.event_row` encodes it) as the audit log reads it back."""
    return Event(
        id=row["id"],
        kind=row["kind"],
        type=row["type"],
        object_type=row["object_type"],
        object_id=row["object_id"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        cause=row["cause"],
        actor=row["actor"],
        data=json.loads(row["data"]),
        created_at_us=row["created_at_us"],
        sequence=row["object_sequence"],
        snapshot=json.loads(row["snapshot"]),
    )


def _check_plan(plan: Plan, payment: PaymentFacts) -> None:
    """Pair assertions: the hold's entries balance and are the refund's amount, on the
    payment's accounts; every row names the refund; it is born `pending`, due at once."""
    refund, destination_entry, clearing_entry = plan.refund, plan.destination_entry, plan.clearing_entry
    assert (destination_entry.direction, clearing_entry.direction) == ("debit", "credit")
    assert destination_entry.amount_minor - clearing_entry.amount_minor == 0, "a transfer's entries sum to zero"
    assert destination_entry.amount_minor == refund.amount_minor, "the hold's amount is the refund's"
    assert 0 < refund.amount_minor <= AMOUNT_MINOR_MAX
    assert destination_entry.delta == Totals(0, 0, refund.amount_minor, 0), "a hold moves pending totals only"
    assert clearing_entry.delta == Totals(0, 0, 0, refund.amount_minor)
    assert destination_entry.account_id == payment.destination_account_id
    assert clearing_entry.account_id != destination_entry.account_id, "two accounts, one entry each"
    transfer = plan.transfer_row
    assert (transfer["id"], transfer["kind"]) == (refund.transfer_id, "pending")
    assert transfer["owner_id"] == transfer["reference_id"] == refund.id, "the refund owns its hold"
    assert refund.status == states.PENDING and refund.next_attempt_at_us == refund.created_at_us
    assert refund.currency == payment.currency and refund.processor_request_id == refund.id
    assert plan.refund_row["id"] == plan.event_row["object_id"] == refund.id
    assert plan.event_row["object_sequence"] == 1, "a refund's birth is its first published event"
    assert plan.key_row["response_status"] == STATUS_CREATED and plan.key_row["expires_at_us"] is None
