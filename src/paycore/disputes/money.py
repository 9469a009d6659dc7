"""A dispute's ledger transfers (docs/ledger.md, "Disputes"), in the caller's transaction.

    chargeback opens   merchant -> processor.clearing: amount + fee, one transfer that no
                       overdraft flag refuses (the merchant's balance may go negative)
    won                processor.clearing -> merchant: the amount (and the fee, had the
                       processor returned it)
    lost               nothing more

Both are owned by the dispute (ADR 0024) and refer to the payment. `payments.disputed_minor`,
what chargebacks hold of the payment for rule zero, moves in the same transaction, under the
payment's row lock: the refund ceiling's conditional UPDATE (`refunds/ceiling.py`) takes the
same lock, so a refund and a chargeback racing on any processes see each other's amount.
"""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, update

from paycore.disputes.types import Dispute
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.service import AccountTemplate, EntrySpec, TransferSpec
from paycore.payments import service as payments
from paycore.payments.types import Payment

_PAYMENTS = payments.MACHINE.table
_DISPUTED = (
    update(_PAYMENTS)
    .where(_PAYMENTS.c.tenant_id == bindparam("t"), _PAYMENTS.c.id == bindparam("p"))
    .values(disputed_minor=_PAYMENTS.c.disputed_minor + bindparam("delta"))
)


def _clearing(connection: Connection, tenant_id: str, currency: str, now_us: int) -> str:
    template = AccountTemplate(chart.processor_clearing(currency), currency, "debit", no_overdraft=False)
    return ledger.ensure_accounts(connection, tenant_id, [template], now_us=now_us)[template.code].id


def withdraw(connection: Connection, dispute: Dispute, payment: Payment, fee_minor: int, *, now_us: int) -> str:
    """Take the disputed amount and the fee from the merchant; returns the transfer's id."""
    clearing = _clearing(connection, dispute.tenant_id, dispute.currency, now_us)
    merchant = payment.destination_account_id
    total = dispute.amount_minor + fee_minor
    spec = TransferSpec(
        entries=(EntrySpec(merchant, "debit", total), EntrySpec(clearing, "credit", total)),
        currency=dispute.currency,
        metadata={"dispute_id": dispute.id, "amount_minor": str(dispute.amount_minor), "fee_minor": str(fee_minor)},
        reference_type="payment",
        reference_id=payment.id,
        owner_id=dispute.id,
        overdraft_allowed=True,
    )
    transfer = ledger.create_transfer(connection, dispute.tenant_id, spec, now_us=now_us)
    connection.execute(_DISPUTED, {"t": dispute.tenant_id, "p": payment.id, "delta": dispute.amount_minor})
    return transfer.id


def reinstate(connection: Connection, dispute: Dispute, payment: Payment, *, now_us: int) -> str:
    """Give the merchant back what a won dispute returns (the amount); returns the transfer's id."""
    clearing = _clearing(connection, dispute.tenant_id, dispute.currency, now_us)
    amount = dispute.amount_minor
    spec = TransferSpec(
        entries=(EntrySpec(clearing, "debit", amount), EntrySpec(payment.destination_account_id, "credit", amount)),
        currency=dispute.currency,
        metadata={"dispute_id": dispute.id, "amount_minor": str(amount)},
        reference_type="payment",
        reference_id=payment.id,
        owner_id=dispute.id,
    )
    transfer = ledger.create_transfer(connection, dispute.tenant_id, spec, now_us=now_us)
    connection.execute(_DISPUTED, {"t": dispute.tenant_id, "p": payment.id, "delta": -amount})
    return transfer.id
