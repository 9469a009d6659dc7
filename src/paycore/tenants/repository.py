"""SQL for tenants and API keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, select, update

from paycore.db import driver
from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore
from paycore.tenants.models import api_keys, tenant_settings, tenants

# Asked on every request while the server is in local mode (no key yet): on the driver.
_ANY_API_KEY = driver.statement("SELECT id FROM api_keys LIMIT 1")


def insert_tenant(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, tenants, values, ("tenant_id",))


def insert_api_key(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(api_keys.insert().values(values))


def any_api_key(connection: Connection) -> bool:
    return bool(driver.fetch(connection, _ANY_API_KEY, ()))


def any_api_key_now(database: Database) -> bool:
    return bool(database.peek(_ANY_API_KEY, ()))


def find_key(connection: Connection, key_hash: str) -> Row[Any] | None:
    query = select(api_keys).where(api_keys.c.key_hash == key_hash)
    return connection.execute(query).first()


def existing_tenants(connection: Connection, wanted: list[str]) -> set[str]:
    if not wanted:
        return set()
    query = select(tenants.c.tenant_id).where(tenants.c.tenant_id.in_(wanted))
    return {row.tenant_id for row in connection.execute(query)}


def list_tenants(connection: Connection) -> list[Row[Any]]:
    return list(connection.execute(select(tenants).order_by(tenants.c.tenant_id)))


def get_settings(connection: Connection, tenant_id: str) -> Row[Any] | None:
    query = select(tenant_settings).where(tenant_settings.c.tenant_id == tenant_id)
    return connection.execute(query).first()


def put_settings(connection: Connection, tenant_id: str, values: dict[str, Any]) -> None:
    """Insert the tenant's settings row, or update it if it exists (a concurrent first insert
    is waited for on PostgreSQL, then updated)."""
    if insert_or_ignore(connection, tenant_settings, {"tenant_id": tenant_id, **values}, ("tenant_id",)):
        return
    statement = update(tenant_settings).where(tenant_settings.c.tenant_id == tenant_id).values(**values)
    connection.execute(statement)
