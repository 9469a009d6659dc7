"""SQL for received processor webhooks."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

from sqlalchemy import Connection, Row, Update, bindparam, func, select, update

from paycore.inbound.models import processor_webhooks as hooks

_SET_SHAPES_MAX: Final = 16  # the sets of columns a received webhook's update writes


def set_values(connection: Connection, tenant_id: str, event_id: str, values: dict[str, Any]) -> None:
    """Every received webhook is updated once or more (issue 31: building the UPDATE on each
    call cost as much CPU as running it), so the statement is built once per set of columns."""
    parameters = {f"v_{name}": value for name, value in values.items()}
    connection.execute(_set_statement(tuple(values)), {"k_t": tenant_id, "k_event": event_id, **parameters})


@lru_cache(maxsize=_SET_SHAPES_MAX)
def _set_statement(columns: tuple[str, ...]) -> Update:
    statement = update(hooks).where(hooks.c.tenant_id == bindparam("k_t"), hooks.c.event_id == bindparam("k_event"))
    return statement.values({name: bindparam(f"v_{name}") for name in columns})


def due_unmatched(connection: Connection, now_us: int, limit: int) -> list[Row[Any]]:
    query = (
        select(hooks)
        .where(hooks.c.status == "unmatched", hooks.c.next_attempt_at_us <= now_us)
        .order_by(hooks.c.next_attempt_at_us)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return list(connection.execute(query))


def oldest_rematch_due_us(connection: Connection, now_us: int) -> int | None:
    query = select(func.min(hooks.c.next_attempt_at_us)).where(
        hooks.c.status == "unmatched", hooks.c.next_attempt_at_us <= now_us
    )
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest
