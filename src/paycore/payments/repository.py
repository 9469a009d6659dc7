"""SQL for payments. The repository owns the row's shape (`types.payment_row`); status and
schedule changes go through the one lifecycle (`paycore.lifecycle.store`). The refund
ceiling, which updates a payment's `refunded_minor`, is the refunds' rule: `refunds/ceiling.py`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, and_, or_, select

from paycore.lifecycle import store
from paycore.payments import states
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
# prove the partial index `ix_payments_authorizations_open` (migration 0034) serves it. SQLite is
# told so (`INDEXED BY`, an error rather than a scan should the index ever stop serving it): it
# otherwise prefers the overview charts' index `ix_payments_created` (migration 0040), which covers
# the status too but holds every payment.
_AUTHORIZATIONS_OPEN = "SELECT COUNT(*), MIN(created_at_us) FROM payments{hint} WHERE status = 'requires_capture'"
_SQLITE_HINT = " INDEXED BY ix_payments_authorizations_open"


def authorizations_open(connection: Connection) -> tuple[int, int | None]:
    """(count, oldest created_at_us) of the payments authorized and not yet captured, canceled
    or expired, over every tenant: read through the partial index, never the history."""
    hint = _SQLITE_HINT if connection.dialect.name == "sqlite" else ""
    count, oldest = connection.exec_driver_sql(_AUTHORIZATIONS_OPEN.format(hint=hint)).one()
    return int(count), None if oldest is None else int(oldest)


def captures_in_doubt_expired(
    connection: Connection, *, expired_before_us: int, after: tuple[str, str] | None, limit: int
) -> list[tuple[str, str]]:
    """(tenant, payment id), in key order after `after`, over every tenant, of the manual
    payments `in_doubt` with a capture in flight whose authorization expired (the processor's
    figure, stored when it authorized) before `expired_before_us`: what reconciliation's
    reports may prove expired (`reconciliation/expiry.py`)."""
    table = payments.c
    query = select(table.tenant_id, table.id).where(
        table.status == states.IN_DOUBT,
        table.capture_method == "manual",
        table.operation == states.CAPTURE,
        table.authorization_expires_at_us < expired_before_us,
    )
    if after is not None:
        query = query.where(or_(table.tenant_id > after[0], and_(table.tenant_id == after[0], table.id > after[1])))
    query = query.order_by(table.tenant_id, table.id).limit(limit)
    return [(str(tenant_id), str(payment_id)) for tenant_id, payment_id in connection.execute(query)]
