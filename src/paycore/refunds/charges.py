"""SQL for the payment side of a refund: the reservation of refunded amounts on the payment
row. One conditional UPDATE each, so two concurrent refunds can never both fit where only
one does: on PostgreSQL the second waits for the first's row lock and re-checks the
condition on the committed row; on SQLite writers are serialised."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, select, update

from paycore.payments.models import payments

_RESERVE = (
    update(payments)
    .where(
        payments.c.tenant_id == bindparam("t"),
        payments.c.id == bindparam("p"),
        payments.c.status == "succeeded",
        payments.c.refunded_minor + bindparam("amount") <= payments.c.amount_minor,
    )
    .values(refunded_minor=payments.c.refunded_minor + bindparam("amount"))
)
_RELEASE = (
    update(payments)
    .where(payments.c.tenant_id == bindparam("t"), payments.c.id == bindparam("p"))
    .values(refunded_minor=payments.c.refunded_minor - bindparam("amount"))
)
_GET = select(payments).where(payments.c.tenant_id == bindparam("t"), payments.c.id == bindparam("p"))


def get(connection: Connection, tenant_id: str, payment_id: str) -> Row[Any] | None:
    return connection.execute(_GET, {"t": tenant_id, "p": payment_id}).first()


def reserve(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> bool:
    """Add `amount_minor` to the payment's refunded total if it stays within the payment."""
    return connection.execute(_RESERVE, {"t": tenant_id, "p": payment_id, "amount": amount_minor}).rowcount == 1


def release(connection: Connection, tenant_id: str, payment_id: str, amount_minor: int) -> None:
    connection.execute(_RELEASE, {"t": tenant_id, "p": payment_id, "amount": amount_minor})
