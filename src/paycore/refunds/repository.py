"""SQL for refunds. Status changes are compare-and-set on the stored status."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, or_, select, update

from paycore.refunds.models import refunds
from paycore.refunds.states import UNRESOLVED

_INSERT = insert(refunds)
_GET = select(refunds).where(refunds.c.tenant_id == bindparam("t"), refunds.c.id == bindparam("i"))


def add(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT, values)


def get(connection: Connection, tenant_id: str, refund_id: str, *, for_update: bool = False) -> Row[Any] | None:
    query = _GET.with_for_update() if for_update and connection.dialect.name == "postgresql" else _GET
    return connection.execute(query, {"t": tenant_id, "i": refund_id}).first()


def count(connection: Connection, tenant_id: str) -> int:
    query = select(func.count()).select_from(refunds).where(refunds.c.tenant_id == tenant_id)
    return int(connection.execute(query).scalar_one())


def change_status(
    connection: Connection, tenant_id: str, refund_id: str, from_state: str, values: dict[str, Any]
) -> bool:
    """Compare-and-set: True only if the refund was still in `from_state`."""
    statement = (
        update(refunds)
        .where(refunds.c.tenant_id == tenant_id, refunds.c.id == refund_id, refunds.c.status == from_state)
        .values(**values)
    )
    return connection.execute(statement).rowcount == 1


def set_values(connection: Connection, tenant_id: str, refund_id: str, values: dict[str, Any]) -> None:
    statement = update(refunds).where(refunds.c.tenant_id == tenant_id, refunds.c.id == refund_id)
    connection.execute(statement.values(**values))


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


def claim_due(
    connection: Connection, *, statuses: tuple[str, ...], now_us: int, worker_id: str, lease_until_us: int, limit: int
) -> list[Row[Any]]:
    """Claim up to `limit` refunds in `statuses` whose next attempt is due and whose earlier
    claim lapsed: FOR UPDATE SKIP LOCKED on PostgreSQL; SQLite's write transaction is exclusive."""
    query = (
        select(refunds.c.tenant_id, refunds.c.id)
        .where(
            refunds.c.next_attempt_at_us <= now_us,
            refunds.c.status.in_(statuses),
            or_(refunds.c.claimed_until_us.is_(None), refunds.c.claimed_until_us < now_us),
        )
        .order_by(refunds.c.next_attempt_at_us)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    claimed = []
    for key in list(connection.execute(query)):
        set_values(connection, key.tenant_id, key.id, {"claimed_by": worker_id, "claimed_until_us": lease_until_us})
        row = get(connection, key.tenant_id, key.id)
        assert row is not None
        claimed.append(row)
    return claimed


def working_since_us(connection: Connection) -> int | None:
    """When the oldest item in `processing` (a call to the processor or bank in flight, by a
    worker or a request) last changed status, over every tenant; None when there is none."""
    query = select(func.min(refunds.c.updated_at_us)).where(refunds.c.status == "processing")
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


def in_doubt_summary(connection: Connection) -> tuple[int, int | None]:
    query = select(func.count(), func.min(refunds.c.in_doubt_since_us)).where(refunds.c.status == "in_doubt")
    found, oldest = connection.execute(query).one()
    return int(found), oldest


UNRESOLVED_STATUSES = tuple(sorted(UNRESOLVED))
