"""SQL for the audit log: insert and read, nothing else (the table is append-only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select

from paycore.audit.models import events

_INSERT = insert(events)
_OF_OBJECT = (
    select(events)
    .where(events.c.tenant_id == bindparam("t"), events.c.object_id == bindparam("o"))
    .order_by(events.c.created_at_us, events.c.id)
    .limit(bindparam("n"))
)


def add(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT, values)


def events_of(connection: Connection, tenant_id: str, object_id: str, limit: int) -> list[Row[Any]]:
    return list(connection.execute(_OF_OBJECT, {"t": tenant_id, "o": object_id, "n": limit}))


def event_kind(connection: Connection, tenant_id: str, event_id: str) -> str | None:
    query = select(events.c.kind).where(events.c.tenant_id == tenant_id, events.c.id == event_id)
    found = connection.execute(query).scalar_one_or_none()
    return None if found is None else str(found)


def list_events(
    connection: Connection, tenant_id: str, kind: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(events).where(events.c.tenant_id == tenant_id)
    if kind is not None:
        query = query.where(events.c.kind == kind)
    if starting_after is not None:
        query = query.where(events.c.id > starting_after)
    return list(connection.execute(query.order_by(events.c.id).limit(limit)))
