"""SQL for tenants and API keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, func, select, update

from paycore.db import driver, loop_calls
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


# An API key's owner, read once per cache period (`http.context.AuthState`): on the driver, from
# a worker thread's connection (`find_key`) or the event loop's (`find_key_on_loop`).
_FIND_KEY = driver.statement("SELECT tenant_id, id, revoked_at_us FROM api_keys WHERE key_hash = ?")
KeyRow = tuple[str, str, int | None]  # (tenant_id, id, revoked_at_us)


def find_key(connection: Connection, key_hash: str) -> KeyRow | None:
    return _key_row(driver.fetch(connection, _FIND_KEY, (key_hash,)))


async def find_key_on_loop(database: Database, key_hash: str) -> KeyRow | None:
    """`find_key` from the event loop, on PostgreSQL (`db/loop_calls.py`): no worker thread."""
    return _key_row(await loop_calls.fetch(database, _FIND_KEY, (key_hash,), commits=False))


def _key_row(rows: list[tuple[Any, ...]]) -> KeyRow | None:
    assert len(rows) <= 1, "key_hash is unique"
    if not rows:
        return None
    tenant_id, key_id, revoked_at_us = rows[0]
    return str(tenant_id), str(key_id), revoked_at_us


def revoke_api_key(connection: Connection, tenant_id: str, key_id: str, now_us: int) -> bool:
    """Mark the tenant's key revoked; False when it is unknown or already revoked."""
    query = (
        update(api_keys)
        .where(api_keys.c.tenant_id == tenant_id, api_keys.c.id == key_id, api_keys.c.revoked_at_us.is_(None))
        .values(revoked_at_us=now_us)
    )
    return connection.execute(query).rowcount == 1


def list_api_keys(connection: Connection, tenant_id: str, limit: int) -> list[Row[Any]]:
    query = (
        select(api_keys.c.id, api_keys.c.key_prefix, api_keys.c.created_at_us, api_keys.c.revoked_at_us)
        .where(api_keys.c.tenant_id == tenant_id)
        .order_by(api_keys.c.created_at_us, api_keys.c.id)
        .limit(limit)
    )
    return list(connection.execute(query))


def existing_tenants(connection: Connection, wanted: list[str]) -> set[str]:
    if not wanted:
        return set()
    query = select(tenants.c.tenant_id).where(tenants.c.tenant_id.in_(wanted))
    return {row.tenant_id for row in connection.execute(query)}


def tenants_ignoring_case(connection: Connection, wanted: list[str]) -> dict[str, str]:
    """Each existing tenant whose id equals one of `wanted` but for case, by its lower-cased id.
    Reads the tenants table through (no index on lower(tenant_id)): it holds one row per tenant."""
    if not wanted:
        return {}
    lowered = {value.lower() for value in wanted}
    query = select(tenants.c.tenant_id).where(func.lower(tenants.c.tenant_id).in_(lowered))
    return {str(tenant_id).lower(): str(tenant_id) for tenant_id in connection.execute(query).scalars()}


def list_tenants(connection: Connection, limit: int) -> list[Row[Any]]:
    return list(connection.execute(select(tenants).order_by(tenants.c.tenant_id).limit(limit)))


def get_settings(connection: Connection, tenant_id: str) -> Row[Any] | None:
    query = select(tenant_settings).where(tenant_settings.c.tenant_id == tenant_id)
    return connection.execute(query).first()


def lock_settings(connection: Connection, tenant_id: str, defaults: dict[str, Any]) -> Row[Any]:
    """The tenant's settings row, inserted with `defaults` if it has none, locked until the
    transaction ends: FOR UPDATE on PostgreSQL (a concurrent first insert is waited for, then
    read as committed); on SQLite the write transaction holds the database already. So a
    change is checked against the settings it replaces, never against a stale read."""
    insert_or_ignore(connection, tenant_settings, {"tenant_id": tenant_id, **defaults}, ("tenant_id",))
    query = select(tenant_settings).where(tenant_settings.c.tenant_id == tenant_id)
    if connection.dialect.name == "postgresql":
        query = query.with_for_update()
    return connection.execute(query).one()


def update_settings(connection: Connection, tenant_id: str, values: dict[str, Any]) -> None:
    """Change the tenant's settings row (`lock_settings` made sure it exists)."""
    statement = update(tenant_settings).where(tenant_settings.c.tenant_id == tenant_id).values(**values)
    changed = connection.execute(statement).rowcount
    assert changed == 1, "the row lock_settings made or found"
