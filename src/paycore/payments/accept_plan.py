"""A payment's first phase, *accept*, planned (ADR 0026): pure functions from the request to
the rows to write.

In: the request (its key's scope: tenant, key, fingerprint, the clock's `now_us`; and the
validated `NewPayment`), the timings (`processing_stale_ms`), the processor clearing account's
id if this process has seen it, who caused the event (the request id), and the new ids. Out: a
`Plan` holding every row accept writes, exactly as the reference path (`service._start`)
writes them: the key claimed *open* (no answer yet: the settle phase records it), the clearing
account to ensure, the pending transfer (processor clearing debited, the destination credited:
the hold) with its two entries and each account's pending deltas, the payment `processing`
(due to the resolver after `processing_stale_ms`), and its birth event with its snapshot (the
audit row and the tenant's outbox, numbered 1). And the `Payment` the phase returns, built
here, never read back. No I/O: the writers (`accept_repository.py`) only send the plan.

The rows are made by their one home each: the payment by `types.new_payment` and
`types.payment_row`, the transfer by `ledger.transfer_values`, the deltas by
`ledger.entry_totals`, the event by `lifecycle.recording.event_row`, the key by
`KeyScope.row`. The checks that need the rows (the destination exists and holds the payment's
currency, the totals' limits) are the write's, under its locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paycore.audit.rows import EventContext
from paycore.idempotency.service import KeyScope
from paycore.kit.money import AMOUNT_MINOR_MAX, is_known_currency
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.limits import Totals
from paycore.ledger.service import AccountTemplate, EntrySpec, TransferSpec
from paycore.lifecycle import recording
from paycore.payments import lifecycle, states
from paycore.payments.types import NewPayment, Payment, new_payment, payment_row

CAUSE = "api_request"  # the cause of a payment's birth event


@dataclass(frozen=True)
class NewIds:
    """The ids accept may write: the clearing account's only where it is created."""

    payment_id: str
    transfer_id: str
    clearing_account_id: str
    debit_entry_id: str
    credit_entry_id: str
    event_id: str


@dataclass(frozen=True)
class PlannedEntry:
    """One entry of the hold, with what it adds to its account's totals (pending only)."""

    id: str
    account_id: str  # the clearing account's: as planned; the write uses the one it finds
    direction: str
    amount_minor: int
    delta: Totals


@dataclass(frozen=True)
class Plan:
    payment: Payment  # what the phase returns
    key_row: dict[str, Any]  # the key's row, claimed open
    clearing: AccountTemplate
    clearing_known: bool  # this process has written to it: SQLite skips its creation
    transfer_row: dict[str, Any]
    # processor clearing (debit-normal) debited, then the destination credited: the order of
    # the transfer's entries on the reference path.
    entries: tuple[PlannedEntry, PlannedEntry]
    payment_row: dict[str, Any]
    event_row: dict[str, Any]

    @property
    def tenant_id(self) -> str:
        return self.payment.tenant_id

    @property
    def clearing_entry(self) -> PlannedEntry:
        return self.entries[0]

    @property
    def destination_entry(self) -> PlannedEntry:
        return self.entries[1]


def clearing_template(currency: str) -> AccountTemplate:
    """The processor clearing account of `currency`, as the reference path ensures it."""
    return AccountTemplate(chart.processor_clearing(currency), currency, "debit", no_overdraft=False)


def plan_accept(
    scope: KeyScope,
    new: NewPayment,
    *,
    processing_stale_ms: int,
    clearing_account_id: str | None,
    context: EventContext,
    new_ids: NewIds,
) -> Plan | None:
    """The rows of one payment's accept, or None for a request the reference path must answer
    (a destination that is the clearing account itself: the ledger's own rules decide).
    `clearing_account_id`: the tenant's clearing account of the payment's currency as this
    process last wrote to it, or None."""
    assert scope.expires_at_us is None, "a payment's key is kept forever (SPEC §3.1)"
    assert is_known_currency(new.currency), "the HTTP edge refuses an unknown currency"
    if clearing_account_id == new.destination_account_id:
        return None
    now_us, payment_id = scope.now_us, new_ids.payment_id
    clearing = clearing_template(new.currency)
    clearing_id = new_ids.clearing_account_id if clearing_account_id is None else clearing_account_id
    spec = TransferSpec(
        entries=(
            EntrySpec(clearing_id, "debit", new.amount_minor),
            EntrySpec(new.destination_account_id, "credit", new.amount_minor),
        ),
        pending=True,
        currency=new.currency,
        reference_type="payment",
        reference_id=payment_id,
        owner_id=payment_id,
    )
    deltas, _ = ledger.entry_totals(spec.entries, pending=True)
    entry_ids = (new_ids.debit_entry_id, new_ids.credit_entry_id)
    entries = tuple(
        PlannedEntry(entry_id, entry.account_id, entry.direction, entry.amount_minor, deltas[entry.account_id])
        for entry_id, entry in zip(entry_ids, spec.entries, strict=True)
    )
    due_us = now_us + processing_stale_ms * 1000
    payment = new_payment(
        scope.tenant_id, payment_id, scope.key, new, states.PROCESSING, new_ids.transfer_id, now_us, due_us
    )
    event = recording.event_row(
        lifecycle.MACHINE,
        payment,
        None,
        cause=CAUSE,
        actor=new.actor,
        now_us=payment.updated_at_us,
        data=None,
        event_id=new_ids.event_id,
        context=context,
    )
    plan = Plan(
        payment=payment,
        key_row=scope.row(None),
        clearing=clearing,
        clearing_known=clearing_account_id is not None,
        transfer_row=ledger.transfer_values(
            scope.tenant_id, new_ids.transfer_id, "pending", spec, now_us, idempotency_key=None, batch_id=None
        ),
        entries=(entries[0], entries[1]),
        payment_row=payment_row(payment),
        event_row=event,
    )
    _check_plan(plan, processing_stale_ms)
    return plan


def _check_plan(plan: Plan, processing_stale_ms: int) -> None:
    """Pair assertions: the hold's entries balance and are the payment's amount, on its
    accounts; every row names the payment; the payment is born `processing` and due."""
    payment, clearing_entry, destination_entry = plan.payment, plan.clearing_entry, plan.destination_entry
    assert (clearing_entry.direction, destination_entry.direction) == ("debit", "credit")
    assert clearing_entry.amount_minor - destination_entry.amount_minor == 0, "a transfer's entries sum to zero"
    assert clearing_entry.amount_minor == payment.amount_minor, "the hold's amount is the payment's"
    assert 0 < payment.amount_minor <= AMOUNT_MINOR_MAX
    assert clearing_entry.delta == Totals(0, 0, payment.amount_minor, 0), "a hold moves pending totals only"
    assert destination_entry.delta == Totals(0, 0, 0, payment.amount_minor)
    assert clearing_entry.account_id != destination_entry.account_id, "two accounts, one entry each"
    assert destination_entry.account_id == payment.destination_account_id
    assert plan.clearing.currency == payment.currency
    transfer = plan.transfer_row
    assert (transfer["id"], transfer["kind"]) == (payment.transfer_id, "pending")
    assert transfer["owner_id"] == transfer["reference_id"] == payment.id, "the payment owns its hold"
    assert payment.status == states.PROCESSING and payment.processor_request_id == payment.id
    assert payment.next_attempt_at_us == payment.created_at_us + processing_stale_ms * 1000
    assert plan.payment_row["id"] == plan.event_row["object_id"] == payment.id
    assert plan.event_row["object_sequence"] == 1, "a payment's birth is its first published event"
    assert plan.key_row["response_status"] is None, "accept claims the key open: settle answers it"
