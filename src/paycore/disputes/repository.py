"""Every SQL statement of disputes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, Select, delete, func, select, update

from paycore.db.sql import insert_or_ignore
from paycore.disputes.models import dispute_answers_in_flight, disputes
from paycore.lifecycle import lease


def insert_once(connection: Connection, values: dict[str, Any]) -> bool:
    """The dispute's row unless the processor's dispute id is recorded already (then False:
    the first evidence made it; the caller moves that row)."""
    return insert_or_ignore(connection, disputes, values, ("tenant_id", "processor_dispute_id"))


def by_processor_id(
    connection: Connection, tenant_id: str, processor_dispute_id: str, *, for_update: bool
) -> Row[Any] | None:
    query = select(disputes).where(
        disputes.c.tenant_id == tenant_id, disputes.c.processor_dispute_id == processor_dispute_id
    )
    return connection.execute(query.with_for_update() if for_update else query).first()


def get(connection: Connection, tenant_id: str, dispute_id: str) -> Row[Any] | None:
    query = select(disputes).where(disputes.c.tenant_id == tenant_id, disputes.c.id == dispute_id)
    return connection.execute(query).first()


def set_values(connection: Connection, tenant_id: str, dispute_id: str, values: dict[str, Any]) -> None:
    statement = update(disputes).where(disputes.c.tenant_id == tenant_id, disputes.c.id == dispute_id)
    connection.execute(statement.values(**values))


def page(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    payment_id: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Row[Any]]:
    """The tenant's disputes, newest first (ids are time-ordered)."""
    query = select(disputes).where(disputes.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(disputes.c.status == status)
    if payment_id is not None:
        query = query.where(disputes.c.payment_id == payment_id)
    if starting_after is not None:
        query = query.where(disputes.c.id < starting_after)
    return list(connection.execute(query.order_by(disputes.c.id.desc()).limit(limit)))


# --- answers whose reply was lost (`in_flight`) ------------------------------------------

_IN_FLIGHT = dispute_answers_in_flight


def keep_in_flight(connection: Connection, values: dict[str, Any]) -> bool:
    """The dispute kept for the worker to ask about, unless it is kept already (then False)."""
    return insert_or_ignore(connection, _IN_FLIGHT, values, ("tenant_id", "id"))


def clear_in_flight(connection: Connection, tenant_id: str, dispute_id: str) -> int:
    statement = delete(_IN_FLIGHT).where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id)
    return int(connection.execute(statement).rowcount)


def in_flight(connection: Connection, tenant_id: str, dispute_id: str) -> Row[Any] | None:
    query = select(_IN_FLIGHT).where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id)
    return connection.execute(query).first()


def due_in_flight(now_us: int, limit: int) -> Select[Any]:
    """The kept answers due to be asked about, whose lease is free (for `lease.claim`)."""
    return (
        select(_IN_FLIGHT.c.tenant_id, _IN_FLIGHT.c.id)
        .where(_IN_FLIGHT.c.next_attempt_at_us <= now_us, lease.free(_IN_FLIGHT, now_us))
        .order_by(_IN_FLIGHT.c.next_attempt_at_us)
        .limit(limit)
    )


def schedule_in_flight(
    connection: Connection, tenant_id: str, dispute_id: str, holder: str, next_attempt_at_us: int | None
) -> bool:
    """The next round of a kept answer that `holder` still holds (its lease given up); False
    when it was cleared meanwhile or another worker took it (its lease lapsed)."""
    statement = (
        update(_IN_FLIGHT)
        .where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id, _IN_FLIGHT.c.claimed_by == holder)
        .values(next_attempt_at_us=next_attempt_at_us, claimed_by=None, claimed_until_us=None)
    )
    return int(connection.execute(statement).rowcount) == 1


def oldest_in_flight_due_us(connection: Connection, now_us: int) -> int | None:
    query = select(func.min(_IN_FLIGHT.c.next_attempt_at_us)).where(_IN_FLIGHT.c.next_attempt_at_us <= now_us)
    found: int | None = connection.execute(query).scalar_one_or_none()
    return found
