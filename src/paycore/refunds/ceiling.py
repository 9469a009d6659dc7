"""The refund ceiling (SPEC §7, rule zero): the money a customer gets back for a charge never
exceeds what they paid.

`reserve` is one conditional UPDATE of the payment row: it adds the refund's amount to the
payment's `refunded_minor` only where the payment succeeded and the sum, with what chargebacks
hold (`disputed_minor`, SPEC §6.2), stays within what was captured (its amount, or a manual
payment's captured amount: SPEC §6.1), in the transaction that inserts the refund. A chargeback
adds to `disputed_minor` under the same row lock (`disputes/money.py`). So two concurrent
refunds (or a refund and a chargeback), in any processes, can never both fit where only one
does: on PostgreSQL the second waits for the first's row lock and re-checks the
condition on the committed row; on SQLite writers are serialised
(tests/e2e/test_refund_race_processes.py). `release` gives an amount back when a refund fails
or is canceled, in the transaction of that change (`refunds/lifecycle.py`).
What `reserve` returns, the payment row after this refund's amount was added, also decides
whether the refund needs approval (`create_plan.needs_approval`): the sum comes from the same
atomic step, never from a read that a concurrent refund could overtake.

Why the statement is here and the table is reached through payments' service: the rule is
the refunds', so it lives with them; the row is the payment's, and a domain reads another's
tables only through the doors its service opens (the `domain_boundaries` contract). Payments'
service exports its lifecycle `MACHINE`, the owner of the payment row through which the
console's lists read too; its `table` is the table this statement updates. Payments imports
nothing of refunds (the `layers` contract: refunds sits above payments).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, bindparam, func, update

from paycore.payments import service as payments
from paycore.payments.types import Payment, payment_from_row

# Only a payment in this status can be refunded (the payment's own word for it).
REFUNDABLE_STATUS: Final = "succeeded"

_PAYMENTS = payments.MACHINE.table
_RESERVE = (
    update(_PAYMENTS)
    .where(
        _PAYMENTS.c.tenant_id == bindparam("t"),
        _PAYMENTS.c.id == bindparam("p"),
        _PAYMENTS.c.status == REFUNDABLE_STATUS,
        # What was captured (SPEC §6.1): all of an automatic payment, what a manual one captured
        # (what a confirmed manual resolution asked for, when the processor said nothing),
        # as `payments.schemas.captured_minor` reads it.
        _PAYMENTS.c.refunded_minor + _PAYMENTS.c.disputed_minor + bindparam("amount")
        <= func.coalesce(
            _PAYMENTS.c.amount_captured_minor, _PAYMENTS.c.capture_requested_minor, _PAYMENTS.c.amount_minor
        ),
    )
    .values(refunded_minor=_PAYMENTS.c.refunded_minor + bindparam("amount"))
    .returning(*_PAYMENTS.c)
)
_RELEASE = (
    update(_PAYMENTS)
    .where(_PAYMENTS.c.tenant_id == bindparam("t"), _PAYMENTS.c.id == bindparam("p"))
    .values(refunded_minor=_PAYMENTS.c.refunded_minor - bindparam("amount"))
)


def reserve(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> Payment | None:
    """Hold `amount_minor` of a succeeded payment for a refund, if it fits in what is left:
    the payment as reserved (row-locked until the transaction ends), or None (no such
    payment, not succeeded, or too much)."""
    row = connection.execute(_RESERVE, {"t": tenant_id, "p": payment_id, "amount": amount_minor}).first()
    return None if row is None else payment_from_row(row)


def release(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> None:
    """Give back what a failed or canceled refund held."""
    connection.execute(_RELEASE, {"t": tenant_id, "p": payment_id, "amount": amount_minor})
