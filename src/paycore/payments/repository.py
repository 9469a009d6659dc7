"""SQL for payments. The repository owns the row's shape (`types.payment_row`); status and
schedule changes go through the one lifecycle (`paycore.lifecycle.store`). The refund
ceiling, which updates a payment's `refunded_minor`, is the refunds' rule: `refunds/ceiling.py`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row

from paycore.lifecycle import store
from paycore.payments.models import payments


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
