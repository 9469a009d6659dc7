"""SQL for operators, their sessions and the sign-in throttle."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, or_, select, tuple_, update

from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.db.metadata import ALL_TENANTS
from paycore.db.sql import insert_or_ignore
from paycore.operators.models import operator_sessions, operator_sign_in_counts, operators

# Asked while the server may still be in local mode (no API key, no operator yet): on the driver.
_ANY_OPERATOR = driver.statement("SELECT id FROM operators LIMIT 1")
# Local mode's one question, asked on every request while it lasts: one statement for both
# tables (tenants' `api_keys`, named here only for this), not one each.
_ANY_KEY_OR_OPERATOR = driver.statement(
    "SELECT id FROM (SELECT id FROM api_keys LIMIT 1) AS k"
    " UNION ALL SELECT id FROM (SELECT id FROM operators LIMIT 1) AS o"
)


def insert_operator(connection: Connection, values: dict[str, Any]) -> bool:
    """False when the name is taken (by anyone, enabled or not)."""
    return insert_or_ignore(connection, operators, values, ("name",))


def any_operator(connection: Connection) -> bool:
    return bool(driver.fetch(connection, _ANY_OPERATOR, ()))


def any_key_or_operator_now(database: Database) -> bool:
    return bool(database.peek(_ANY_KEY_OR_OPERATOR, ()))


async def any_key_or_operator_on_loop(database: Database) -> bool:
    """`any_key_or_operator_now` from the event loop, on PostgreSQL (`db/loop_calls.py`)."""
    return bool(await loop_calls.fetch(database, _ANY_KEY_OR_OPERATOR, (), commits=False))


def by_name(connection: Connection, name: str) -> Row[Any] | None:
    return connection.execute(select(operators).where(operators.c.name == name)).first()


def by_token_hash(connection: Connection, token_hash: str) -> Row[Any] | None:
    return connection.execute(select(operators).where(operators.c.token_hash == token_hash)).first()


def all_operators(connection: Connection, *, limit: int) -> list[Row[Any]]:
    return list(connection.execute(select(operators).order_by(operators.c.name).limit(limit)))


def disable(connection: Connection, tenant_id: str, operator_id: str, now_us: int) -> None:
    statement = update(operators).where(
        operators.c.tenant_id == tenant_id, operators.c.id == operator_id, operators.c.disabled_at_us.is_(None)
    )
    connection.execute(statement.values(disabled_at_us=now_us))


def insert_session(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(operator_sessions.insert().values(values))


def session_with_operator(connection: Connection, token_hash: str) -> Row[Any] | None:
    """The session with this cookie hash and its operator's row, in one statement."""
    session = operator_sessions.c
    query = (
        select(
            session.id.label("session_id"),
            session.created_at_us.label("session_created_at_us"),
            session.last_seen_us,
            session.ended_at_us,
            *operators.c,
        )
        .join_from(
            operator_sessions,
            operators,
            (operators.c.tenant_id == session.tenant_id) & (operators.c.id == session.operator_id),
        )
        .where(session.token_hash == token_hash)
    )
    return connection.execute(query).first()


def touch_session(connection: Connection, tenant_id: str, session_id: str, now_us: int) -> None:
    statement = update(operator_sessions).where(
        operator_sessions.c.tenant_id == tenant_id, operator_sessions.c.id == session_id
    )
    connection.execute(statement.values(last_seen_us=now_us))


def end_sessions(
    connection: Connection, tenant_id: str, *, operator_id: str, session_id: str | None, cause: str, now_us: int
) -> int:
    """End the operator's open sessions (only `session_id` when given); how many ended."""
    table = operator_sessions.c
    statement = update(operator_sessions).where(
        table.tenant_id == tenant_id, table.operator_id == operator_id, table.ended_at_us.is_(None)
    )
    if session_id is not None:
        statement = statement.where(table.id == session_id)
    return connection.execute(statement.values(ended_at_us=now_us, end_cause=cause)).rowcount


def sign_in_counts(connection: Connection, address: str, names: tuple[str, ...]) -> dict[str, Row[Any]]:
    """The address's rows of failures for `names` (`*`, then the name typed), each created if it
    has none, locked for this transaction on PostgreSQL in that order (two processes counting
    one address's failures take turns, and never wait on each other crosswise)."""
    table = operator_sign_in_counts.c
    found = {}
    for name in names:
        fresh = {
            "tenant_id": ALL_TENANTS,
            "address": address,
            "operator_name": name,
            "window_start_us": 0,
            "failures": 0,
        }
        insert_or_ignore(connection, operator_sign_in_counts, fresh, ("tenant_id", "address", "operator_name"))
        query = select(operator_sign_in_counts).where(
            table.tenant_id == ALL_TENANTS, table.address == address, table.operator_name == name
        )
        if connection.dialect.name == "postgresql":
            query = query.with_for_update()
        row = connection.execute(query).first()
        assert row is not None, "inserted or there before"
        found[name] = row
    return found


def set_sign_in_count(connection: Connection, address: str, name: str, values: dict[str, Any]) -> None:
    table = operator_sign_in_counts.c
    statement = update(operator_sign_in_counts).where(
        table.tenant_id == ALL_TENANTS, table.address == address, table.operator_name == name
    )
    connection.execute(statement.values(values))


def delete_ended_sign_in_counts(connection: Connection, *, started_by_us: int, now_us: int, limit: int) -> int:
    """Delete up to `limit` rows whose window started by `started_by_us` and whose block (if any)
    has ended: they count nothing any more. Rows another transaction holds are skipped, so this
    never waits."""
    table = operator_sign_in_counts.c
    ended = (
        select(table.tenant_id, table.address, table.operator_name)
        .where(
            table.window_start_us <= started_by_us,
            or_(table.blocked_until_us.is_(None), table.blocked_until_us <= now_us),
        )
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        ended = ended.with_for_update(skip_locked=True)
    key = tuple_(table.tenant_id, table.address, table.operator_name)
    return int(connection.execute(delete(operator_sign_in_counts).where(key.in_(ended))).rowcount)
