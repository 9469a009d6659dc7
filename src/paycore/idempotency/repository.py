"""SQL for idempotency keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, case, delete, func, or_, select, update

from paycore.db import driver
from paycore.idempotency.models import idempotency_keys as keys

# Recording the response is on every money-moving POST: it runs on the driver
# (paycore.db.driver), like the transfer's own statements and the claim.
_RECORD = driver.statement(
    'UPDATE idempotency_keys SET response_status = ?, response_body = ? WHERE tenant_id = ? AND "key" = ?'
)


# On PostgreSQL the claim first queues on an advisory lock of its (tenant, key), held to the
# end of the transaction, so that a duplicate waits for a key once, however many requests hold
# it in turn (ADR 0004, "One wait"). Without it the INSERT waits on the holder's uncommitted row,
# and when the holder rolls back and another duplicate claims the key, waits again with a fresh
# lock_timeout: a duplicate could wait several bounds. Waiters on one lock are served in order
# and each one's lock_timeout runs from when it began to wait. The two-integer form keeps these
# locks apart from the migrations' (`paycore.db.migrate`); a hash shared by two keys only makes
# them take turns. The function `paycore_create_transfer` (migration 0020) queues the same way.
KEY_QUEUE_CLASS = 0x6B6579  # "key"
_COLUMNS = ("tenant_id", "key", "fingerprint", "response_status", "response_body", "created_at_us", "expires_at_us")
_INTO = (
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    " expires_at_us)"
)
_CLAIM = driver.Statement(
    sqlite=f'{_INTO} VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"',
    postgresql=(
        f"{_INTO} SELECT %s, %s, %s, %s::integer, %s::text, %s::bigint, %s::bigint"
        f" FROM (SELECT pg_advisory_xact_lock({KEY_QUEUE_CLASS}, hashtext(%s || '/' || %s))) AS queued"
        ' ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
    ),
)


def waited_for_the_key(context: str) -> bool:
    """Whether a PostgreSQL lock wait past its bound, by its error's context (the statement
    that waited), was the wait for a key's holder: its queue or its row."""
    return f"pg_advisory_xact_lock({KEY_QUEUE_CLASS}," in context or "INSERT INTO idempotency_keys" in context


def claim(connection: Connection, values: dict[str, Any]) -> bool:
    """Insert the key's row; False (and no change) if the key exists. On PostgreSQL a
    transaction that holds the key and has not ended makes this wait (bounded by lock_timeout,
    once) for its outcome."""
    params = [values[name] for name in _COLUMNS]
    if connection.dialect.name == "postgresql":
        params += [values["tenant_id"], values["key"]]
    return bool(driver.fetch(connection, _CLAIM, params))


_GET = select(keys).where(keys.c.tenant_id == bindparam("t"), keys.c.key == bindparam("k"))


def get(connection: Connection, tenant_id: str, key: str) -> Row[Any] | None:
    return connection.execute(_GET, {"t": tenant_id, "k": key}).first()


def record_response(connection: Connection, tenant_id: str, key: str, status: int, body: str) -> None:
    driver.execute(connection, _RECORD, (status, body, tenant_id, key))


_COMPLETE = (
    update(keys)
    .where(keys.c.tenant_id == bindparam("t"), keys.c.key == bindparam("k"), keys.c.response_status.is_(None))
    .values(response_status=bindparam("status"), response_body=bindparam("body"))
)


def complete(connection: Connection, tenant_id: str, key: str, status: int, body: str) -> bool:
    """Record the response of a key claimed open; False if a response was already recorded."""
    return connection.execute(_COMPLETE, {"t": tenant_id, "k": key, "status": status, "body": body}).rowcount == 1


def oldest_expired_us(connection: Connection, now_us: int) -> int | None:
    query = select(func.min(keys.c.expires_at_us)).where(
        keys.c.expires_at_us.is_not(None), keys.c.expires_at_us <= now_us
    )
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


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


def answers_page(
    connection: Connection, *, after: tuple[str, str] | None, limit: int, containing: str
) -> list[Row[Any]]:
    """The next `limit` keys in (tenant_id, key) order; `response_body` only where it contains
    `containing` (a bounded walk of the primary key, whatever the number of matches)."""
    pattern = "%" + containing.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    body = case((keys.c.response_body.like(pattern, escape="\\"), keys.c.response_body), else_=None)
    query = select(keys.c.tenant_id, keys.c.key, body.label("response_body"))
    if after is not None:
        query = query.where(or_(keys.c.tenant_id > after[0], and_(keys.c.tenant_id == after[0], keys.c.key > after[1])))
    return list(connection.execute(query.order_by(keys.c.tenant_id, keys.c.key).limit(limit)))


def replace_body(connection: Connection, tenant_id: str, key: str, was: str, now: str) -> bool:
    statement = (
        update(keys)
        .where(keys.c.tenant_id == tenant_id, keys.c.key == key, keys.c.response_body == was)
        .values(response_body=now)
    )
    return connection.execute(statement).rowcount == 1


def count_keys(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(keys)).scalar_one())
