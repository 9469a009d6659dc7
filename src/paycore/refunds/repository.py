"""SQL for refunds. The repository owns the row's shape (`types.refund_row`); status and
schedule changes go through the one lifecycle (`paycore.lifecycle.store`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, func, select

from paycore.lifecycle import store
from paycore.refunds.models import refunds


def payment_of(connection: Connection, tenant_id: str, refund_id: str) -> str | None:
    """The payment a refund belongs to; None: no such refund."""
    query = select(refunds.c.payment_id).where(refunds.c.tenant_id == tenant_id, refunds.c.id == refund_id)
    found: str | None = connection.execute(query).scalar_one_or_none()
    return found


def page(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    """The tenant's refunds, oldest first."""
    statuses = None if status is None else (status,)
    return store.page(connection, refunds, tenant_id, statuses=statuses, starting_after=starting_after, limit=limit)


def count(connection: Connection, tenant_id: str) -> int:
    query = select(func.count()).select_from(refunds).where(refunds.c.tenant_id == tenant_id)
    return int(connection.execute(query).scalar_one())


def of_payment(
    connection: Connection, tenant_id: str, payment_id: str, *, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(refunds).where(refunds.c.tenant_id == tenant_id, refunds.c.payment_id == payment_id)
    if starting_after is not None:
        query = query.where(refunds.c.id > starting_after)
    return list(connection.execute(query.order_by(refunds.c.created_at_us, refunds.c.id).limit(limit)))


def totals_by_status(connection: Connection, tenant_id: str, payment_id: str) -> dict[str, int]:
    query = (
        select(refunds.c.status, func.coalesce(func.sum(refunds.c.amount_minor), 0))
        .where(refunds.c.tenant_id == tenant_id, refunds.c.payment_id == payment_id)
        .group_by(refunds.c.status)
    )
    return {status: int(total) for status, total in connection.execute(query)}
