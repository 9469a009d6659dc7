"""SQL for tenants and API keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, select

from paycore.db.sql import insert_or_ignore
from paycore.tenants.models import api_keys, tenants


def insert_tenant(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, tenants, values, ("tenant_id",))


def insert_api_key(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(api_keys.insert().values(values))


def any_api_key(connection: Connection) -> bool:
    return connection.execute(select(api_keys.c.id).limit(1)).first() is not None


def find_key(connection: Connection, key_hash: str) -> Row[Any] | None:
    query = select(api_keys).where(api_keys.c.key_hash == key_hash)
    return connection.execute(query).first()


def list_tenants(connection: Connection) -> list[Row[Any]]:
    return list(connection.execute(select(tenants).order_by(tenants.c.tenant_id)))
