"""SQL for payments. The repository owns the row's shape (`types.payment_row`); status and
schedule changes go through the one lifecycle (`paycore.lifecycle.store`).

The refund ceiling (SPEC §7, rule zero: the money a customer gets back for a charge never
exceeds what they paid) is `reserve_refund`: one conditional UPDATE of the payment row, so two
concurrent refunds can never both fit where only one does. On PostgreSQL the second waits for
the first's row lock and re-checks the condition on the committed row; on SQLite writers are
serialised. `release_refund` gives an amount back when a refund fails or is canceled.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, update

from paycore.lifecycle import store
from paycore.payments import states
from paycore.payments.models import payments
from paycore.payments.types import Payment, payment_from_row

_RESERVE = (
    update(payments)
    .where(
        payments.c.tenant_id == bindparam("t"),
        payments.c.id == bindparam("p"),
        payments.c.status == states.SUCCEEDED,
        payments.c.refunded_minor + bindparam("amount") <= payments.c.amount_minor,
    )
    .values(refunded_minor=payments.c.refunded_minor + bindparam("amount"))
    .returning(*payments.c)
)
_RELEASE = (
    update(payments)
    .where(payments.c.tenant_id == bindparam("t"), payments.c.id == bindparam("p"))
    .values(refunded_minor=payments.c.refunded_minor - bindparam("amount"))
)


def exists(connection: Connection, tenant_id: str, payment_id: str) -> bool:
    return store.exists(connection, payments, tenant_id, payment_id)


def list_payments(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    statuses = None if status is None else (status,)
    return store.page(
        connection,
        payments,
        tenant_id,
        statuses=statuses,
        starting_after=starting_after,
        limit=limit,
        newest_first=True,
    )


def reserve_refund(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> Payment | None:
    """Add `amount_minor` to a succeeded payment's refunded total if it stays within the
    payment: the payment as reserved, or None (no such payment, not succeeded, or too much)."""
    row = connection.execute(_RESERVE, {"t": tenant_id, "p": payment_id, "amount": amount_minor}).first()
    return None if row is None else payment_from_row(row)


def release_refund(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> None:
    connection.execute(_RELEASE, {"t": tenant_id, "p": payment_id, "amount": amount_minor})


def working_since_us(connection: Connection) -> int | None:
    """When the oldest payment in `processing` (a call in flight) last changed status."""
    return store.working_since_us(connection, payments, states.PROCESSING)


def in_doubt_summary(connection: Connection) -> tuple[int, int | None]:
    """(count, oldest in_doubt_since_us) over every tenant: the in-doubt gauges."""
    return store.in_doubt_summary(connection, payments, states.IN_DOUBT)
