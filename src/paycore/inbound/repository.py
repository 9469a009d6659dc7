"""SQL for received processor webhooks."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, func, select

from paycore.db.sql import update_by_key
from paycore.inbound.models import processor_webhooks as hooks
from paycore.lifecycle import per_tenant


def set_values(connection: Connection, tenant_id: str, event_id: str, values: dict[str, Any]) -> None:
    update_by_key(connection, hooks, {"tenant_id": tenant_id, "event_id": event_id}, values)


def due_unmatched(connection: Connection, now_us: int, limit: int) -> list[Row[Any]]:
    """Up to `limit` unmatched events whose next try is due, taken tenant by tenant
    (`per_tenant.claim`), locked (skipping locked ones) on PostgreSQL."""
    query = (
        select(hooks)
        .where(hooks.c.status == "unmatched", hooks.c.next_attempt_at_us <= now_us)
        .order_by(hooks.c.next_attempt_at_us, hooks.c.event_id)
    )
    taken = per_tenant.claim(connection, hooks, query, rank=hooks.c.next_attempt_at_us, limit=limit, key="event_id")
    return per_tenant.flatten(taken)


def oldest_rematch_due_us(connection: Connection, now_us: int) -> int | None:
    query = select(func.min(hooks.c.next_attempt_at_us)).where(
        hooks.c.status == "unmatched", hooks.c.next_attempt_at_us <= now_us
    )
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest
