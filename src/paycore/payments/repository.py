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


# The open authorizations' one statement (`/metrics`): the status a literal, so that both planners
# prove the partial index `ix_payments_authorizations_open` (migration 0034) serves it.
_AUTHORIZATIONS_OPEN = "SELECT COUNT(*), MIN(created_at_us) FROM payments WHERE status = 'requires_capture'"


def authorizations_open(connection: Connection) -> tuple[int, int | None]:
    """(count, oldest created_at_us) of the payments authorized and not yet captured, canceled
    or expired, over every tenant: read through the partial index, never the history."""
    count, oldest = connection.exec_driver_sql(_AUTHORIZATIONS_OPEN).one()
    return int(count), None if oldest is None else int(oldest)
