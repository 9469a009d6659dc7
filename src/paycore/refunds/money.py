"""A refund's ledger transfer (docs/ledger.md). Every function runs in the caller's
transaction, next to the refund row it belongs to.

    created            hold (pending): the payment's destination account -> processor clearing
    succeeded          post the hold (`lifecycle._effect`)
    failed / canceled  void the hold (`lifecycle._effect`)

So the merchant's available balance never includes money on its way back to a customer.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payments.types import Payment


def hold_spec(
    currency: str, destination_account_id: str, refund_id: str, amount_minor: int, clearing_account_id: str
) -> TransferSpec:
    """The refund's pending transfer: the account the payment credited debited, the processor's
    clearing account credited (the one home of its shape: `hold` writes it, the data plane's
    planner, `create_plan.py`, plans it)."""
    return TransferSpec(
        entries=(
            EntrySpec(destination_account_id, "debit", amount_minor),
            EntrySpec(clearing_account_id, "credit", amount_minor),
        ),
        pending=True,
        currency=currency,
        reference_type="refund",
        reference_id=refund_id,
        owner_id=refund_id,
    )


def hold(connection: Connection, payment: Payment, refund_id: str, amount_minor: int, *, now_us: int) -> str:
    """The refund's pending transfer, from the account the payment credited back to the
    processor's clearing account; its id."""
    clearing = ledger.find_account_by_code(connection, payment.tenant_id, chart.processor_clearing(payment.currency))
    assert clearing is not None, "a succeeded payment's clearing account exists"
    spec = hold_spec(payment.currency, payment.destination_account_id, refund_id, amount_minor, clearing.id)
    return ledger.create_transfer(connection, payment.tenant_id, spec, now_us=now_us).id
