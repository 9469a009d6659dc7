"""SQL for idempotency keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, select, update

from paycore.db.sql import insert_or_ignore
from paycore.idempotency.models import idempotency_keys as keys


def claim(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, keys, values, ("tenant_id", "key"))


def get(connection: Connection, tenant_id: str, key: str) -> Row[Any] | None:
    query = select(keys).where(keys.c.tenant_id == tenant_id, keys.c.key == key)
    return connection.execute(query).first()


def record_response(connection: Connection, tenant_id: str, key: str, status: int, body: str) -> None:
    statement = (
        update(keys)
        .where(keys.c.tenant_id == tenant_id, keys.c.key == key)
        .values(response_status=status, response_body=body)
    )
    connection.execute(statement)


def delete_expired(connection: Connection, now_us: int, limit: int) -> int:
    victims = (
        select(keys.c.tenant_id, keys.c.key)
        .where(keys.c.expires_at_us.is_not(None), keys.c.expires_at_us <= now_us)
        .limit(limit)
    )
    rows = list(connection.execute(victims))
    for row in rows:
        connection.execute(delete(keys).where(keys.c.tenant_id == row.tenant_id, keys.c.key == row.key))
    return len(rows)
