"""SQL for payments. Status changes are compare-and-set on the stored status."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, or_, select, update

from paycore.payments.models import payments
from paycore.payments.states import UNRESOLVED

_INSERT = insert(payments)
_GET = select(payments).where(payments.c.tenant_id == bindparam("t"), payments.c.id == bindparam("i"))


def add(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT, values)


def get(connection: Connection, tenant_id: str, payment_id: str, *, for_update: bool = False) -> Row[Any] | None:
    query = _GET.with_for_update() if for_update and connection.dialect.name == "postgresql" else _GET
    return connection.execute(query, {"t": tenant_id, "i": payment_id}).first()


def get_by_key(connection: Connection, tenant_id: str, key: str) -> Row[Any] | None:
    query = select(payments).where(payments.c.tenant_id == tenant_id, payments.c.idempotency_key == key)
    return connection.execute(query).first()


def change_status(
    connection: Connection, tenant_id: str, payment_id: str, from_state: str, values: dict[str, Any]
) -> bool:
    """Compare-and-set: True only if the payment was still in `from_state`."""
    statement = (
        update(payments)
        .where(payments.c.tenant_id == tenant_id, payments.c.id == payment_id, payments.c.status == from_state)
        .values(**values)
    )
    return connection.execute(statement).rowcount == 1


def set_schedule(connection: Connection, tenant_id: str, payment_id: str, values: dict[str, Any]) -> None:
    statement = update(payments).where(payments.c.tenant_id == tenant_id, payments.c.id == payment_id)
    connection.execute(statement.values(**values))


def list_payments(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(payments).where(payments.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(payments.c.status == status)
    if starting_after is not None:
        query = query.where(payments.c.id < starting_after)
    return list(connection.execute(query.order_by(payments.c.id.desc()).limit(limit)))


def claim_due(
    connection: Connection, *, now_us: int, worker_id: str, lease_until_us: int, limit: int
) -> list[Row[Any]]:
    """Claim up to `limit` unresolved payments whose next attempt is due and whose earlier
    claim (if any) has lapsed. PostgreSQL: FOR UPDATE SKIP LOCKED, so concurrent workers
    take disjoint sets; SQLite: the write transaction is already exclusive."""
    query = (
        select(payments.c.tenant_id, payments.c.id)
        .where(
            payments.c.next_attempt_at_us <= now_us,
            payments.c.status.in_(sorted(UNRESOLVED)),
            or_(payments.c.claimed_until_us.is_(None), payments.c.claimed_until_us < now_us),
        )
        .order_by(payments.c.next_attempt_at_us)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    keys = list(connection.execute(query))
    claimed = []
    for key in keys:
        connection.execute(
            update(payments)
            .where(payments.c.tenant_id == key.tenant_id, payments.c.id == key.id)
            .values(claimed_by=worker_id, claimed_until_us=lease_until_us)
        )
        row = get(connection, key.tenant_id, key.id)
        assert row is not None
        claimed.append(row)
    return claimed


def working_since_us(connection: Connection) -> int | None:
    """When the oldest item in `processing` (a call to the processor or bank in flight, by a
    worker or a request) last changed status, over every tenant; None when there is none."""
    query = select(func.min(payments.c.updated_at_us)).where(payments.c.status == "processing")
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


def in_doubt_summary(connection: Connection) -> tuple[int, int | None]:
    """(count, oldest in_doubt_since_us) over every tenant: the in-doubt gauges."""
    query = select(func.count(), func.min(payments.c.in_doubt_since_us)).where(payments.c.status == "in_doubt")
    count, oldest = connection.execute(query).one()
    return int(count), oldest
