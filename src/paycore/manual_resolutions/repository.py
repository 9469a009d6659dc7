"""SQL for manual resolutions (their one status change is `lifecycle.MACHINE`'s)."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, Row, select

from paycore.kit import ids
from paycore.manual_resolutions import states
from paycore.manual_resolutions.models import manual_resolutions

_OF_OBJECT_MAX: Final = 100  # proposals about one item: a handful in practice
_table = manual_resolutions.c


def new_id() -> str:
    return ids.new_id("mr")


def open_proposal(connection: Connection, tenant_id: str, kind: str, object_id: str) -> Row[Any] | None:
    query = select(manual_resolutions).where(
        _table.tenant_id == tenant_id,
        _table.object_type == kind,
        _table.object_id == object_id,
        _table.status == states.PROPOSED,
    )
    return connection.execute(query).first()


def of_object(connection: Connection, tenant_id: str, object_id: str) -> list[Row[Any]]:
    query = (
        select(manual_resolutions)
        .where(_table.tenant_id == tenant_id, _table.object_id == object_id)
        .order_by(_table.id)
        .limit(_OF_OBJECT_MAX)
    )
    return list(connection.execute(query))


def exists(connection: Connection, tenant_id: str | None, resolution_id: str) -> bool:
    query = select(_table.id).where(_table.id == resolution_id)
    if tenant_id is not None:
        query = query.where(_table.tenant_id == tenant_id)
    return connection.execute(query).first() is not None


def page(
    connection: Connection, *, tenant_id: str | None, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(manual_resolutions)
    if tenant_id is not None:
        query = query.where(_table.tenant_id == tenant_id)
    if status is not None:
        query = query.where(_table.status == status)
    if starting_after is not None:
        query = query.where(_table.id < starting_after)
    return list(connection.execute(query.order_by(_table.id.desc()).limit(limit)))
