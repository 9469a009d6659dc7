"""SQL for outgoing webhooks: endpoints, deliveries, attempts. Nothing here decides anything.

An endpoint's lease is the lifecycle's (`paycore.lifecycle.lease`): claimed tenant by tenant with
FOR UPDATE SKIP LOCKED on PostgreSQL, given up by a compare-and-set on its holder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, Select, and_, case, exists, func, insert, or_, select, update

from paycore.db.sql import update_by_key
from paycore.lifecycle import lease, transition
from paycore.webhooks.models import webhook_attempts, webhook_deliveries, webhook_endpoints
from paycore.webhooks.states import (
    CANCELED,
    DELIVERY_TRANSITIONS,
    DISABLED,
    ENABLED,
    ENDPOINT_TRANSITIONS,
    FAILED,
    PENDING,
)

E, D, A = webhook_endpoints, webhook_deliveries, webhook_attempts
_DELIVERY, _ENDPOINT = DELIVERY_TRANSITIONS, ENDPOINT_TRANSITIONS


def insert_endpoint(connection: Connection, values: Mapping[str, Any]) -> None:
    connection.execute(insert(E), dict(values))


def get_endpoint(
    connection: Connection, tenant_id: str, endpoint_id: str, *, for_update: bool = False
) -> Row[Any] | None:
    query = select(E).where(E.c.tenant_id == tenant_id, E.c.id == endpoint_id)
    if for_update and connection.dialect.name == "postgresql":
        query = query.with_for_update()
    return connection.execute(query).first()


def list_endpoints(
    connection: Connection, tenant_id: str, *, statuses: Sequence[str], starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(E).where(E.c.tenant_id == tenant_id, E.c.status.in_(list(statuses)))
    if starting_after is not None:
        query = query.where(E.c.id > starting_after)
    return list(connection.execute(query.order_by(E.c.id).limit(limit)))


def enabled_endpoints(connection: Connection, tenant_id: str) -> list[Row[Any]]:
    query = select(E.c.id, E.c.events).where(E.c.tenant_id == tenant_id, E.c.status == ENABLED)
    return list(connection.execute(query))


def update_endpoint(connection: Connection, tenant_id: str, endpoint_id: str, values: Mapping[str, Any]) -> bool:
    statement = update(E).where(E.c.tenant_id == tenant_id, E.c.id == endpoint_id)
    return connection.execute(statement.values(**values)).rowcount == 1


# An endpoint's place in the claim's order, as one value: never served (-1) first, then least
# recently served (a time in µs).
_SERVED_FIRST = func.coalesce(E.c.served_at_us, -1)


def _claimable(now_us: int) -> Select[Any]:
    """Enabled endpoints with a due delivery, not blocked by their own backoff and not held by
    another worker, least recently served first (fair across endpoints, hence across tenants)."""
    due = exists().where(
        D.c.tenant_id == E.c.tenant_id,
        D.c.endpoint_id == E.c.id,
        D.c.status == PENDING,
        D.c.next_attempt_at_us <= now_us,
    )
    return (
        select(E.c.tenant_id, E.c.id)
        .where(
            E.c.status == ENABLED,
            or_(E.c.blocked_until_us.is_(None), E.c.blocked_until_us <= now_us),
            lease.free(E, now_us),
            due,
        )
        .order_by(E.c.served_at_us.is_not(None), E.c.served_at_us, E.c.tenant_id, E.c.id)
    )


def any_claimable(connection: Connection, *, now_us: int) -> bool:
    """Whether a claim would find work: a read, so that an idle delivery thread's poll takes no
    write lock (SQLite's single writer is the API's too)."""
    return connection.execute(_claimable(now_us).limit(1)).first() is not None


def claim_endpoints(
    connection: Connection, *, now_us: int, worker_id: str, lease_until_us: int, limit: int
) -> list[Row[Any]]:
    """Up to `limit` claimable endpoints (`_claimable`), each leased to `worker_id` in this
    transaction (the lifecycle's lease: concurrent claims take disjoint sets)."""
    return lease.claim(
        connection,
        E,
        _claimable(now_us),
        rank=_SERVED_FIRST,
        limit=limit,
        holder=worker_id,
        until_us=lease_until_us,
        values={"served_at_us": now_us},
    )


def release_endpoint(connection: Connection, tenant_id: str, endpoint_id: str, worker_id: str) -> bool:
    """Give up `worker_id`'s lease on the endpoint; False when another worker holds it now."""
    return lease.release(connection, E, {"tenant_id": tenant_id, "id": endpoint_id}, worker_id)


def due_deliveries(
    connection: Connection, tenant_id: str, endpoint_id: str, *, now_us: int, limit: int
) -> list[Row[Any]]:
    """An endpoint's due deliveries, oldest due first (event order among the first attempts)."""
    query = (
        select(D)
        .where(
            D.c.tenant_id == tenant_id,
            D.c.endpoint_id == endpoint_id,
            D.c.status == PENDING,
            D.c.next_attempt_at_us <= now_us,
        )
        .order_by(D.c.next_attempt_at_us, D.c.event_id, D.c.id)
        .limit(limit)
    )
    return list(connection.execute(query))


def insert_deliveries(connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        connection.execute(insert(D), [dict(row) for row in rows])


def get_delivery(connection: Connection, tenant_id: str, delivery_id: str) -> Row[Any] | None:
    return connection.execute(select(D).where(D.c.tenant_id == tenant_id, D.c.id == delivery_id)).first()


def change_delivery(
    connection: Connection, tenant_id: str, delivery_id: str, to_status: str, values: Mapping[str, Any]
) -> bool:
    """A pending delivery's status change (the lifecycle's one, `transition.change`), False when
    it is not pending any more. Its record is the attempt its transaction wrote first."""
    key = {"tenant_id": tenant_id, "id": delivery_id}
    return (
        transition.change(connection, D, key, (PENDING, to_status), transitions=_DELIVERY, record=None, values=values)
        == 1
    )


def reschedule_delivery(connection: Connection, tenant_id: str, delivery_id: str, values: Mapping[str, Any]) -> bool:
    """A delivery still pending after a failed attempt: its next attempt (no status change;
    nothing when it left `pending` meanwhile, e.g. canceled)."""
    return update_by_key(connection, D, {"tenant_id": tenant_id, "id": delivery_id}, values, status_in=(PENDING,)) == 1


def cancel_pending(connection: Connection, tenant_id: str, endpoint_id: str, values: Mapping[str, Any]) -> int:
    """Every pending delivery of the endpoint canceled (one statement, through the lifecycle's
    status change); their record is the endpoint's deletion, in the same transaction."""
    key = {"tenant_id": tenant_id, "endpoint_id": endpoint_id}
    return transition.change(connection, D, key, (PENDING, CANCELED), transitions=_DELIVERY, record=None, values=values)


def change_endpoint(
    connection: Connection,
    endpoint: tuple[str, str],
    move: tuple[str, str],
    values: Mapping[str, Any],
    *,
    record: transition.Record,
) -> bool:
    """An endpoint's ((tenant_id, id)) status change (the lifecycle's one), recorded by `record`."""
    key = {"tenant_id": endpoint[0], "id": endpoint[1]}
    return transition.change(connection, E, key, move, transitions=_ENDPOINT, record=record, values=values) == 1


def deliveries_of_event(connection: Connection, tenant_id: str, event_id: str) -> list[Row[Any]]:
    query = select(D).where(D.c.tenant_id == tenant_id, D.c.event_id == event_id).order_by(D.c.id)
    return list(connection.execute(query))


def insert_attempt(connection: Connection, values: Mapping[str, Any]) -> None:
    connection.execute(insert(A), dict(values))


def attempts_of_event(connection: Connection, tenant_id: str, event_id: str, limit: int) -> list[Row[Any]]:
    query = select(A).where(A.c.tenant_id == tenant_id, A.c.event_id == event_id).order_by(A.c.id).limit(limit)
    return list(connection.execute(query))


def attempts_by_outcome(connection: Connection) -> dict[str, int]:
    query = select(A.c.outcome, func.count()).group_by(A.c.outcome)
    return {str(outcome): int(count) for outcome, count in connection.execute(query)}


def oldest_pending(connection: Connection) -> list[Row[Any]]:
    """Per endpoint with pending deliveries (every tenant): its oldest pending delivery's birth."""
    query = (
        select(D.c.tenant_id, D.c.endpoint_id, func.min(D.c.created_at_us).label("oldest_us"))
        .where(D.c.status == PENDING)
        .group_by(D.c.tenant_id, D.c.endpoint_id)
    )
    return list(connection.execute(query))


def count_disabled(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(E).where(E.c.status == DISABLED)).scalar_one())


def oldest_due_us(connection: Connection, now_us: int) -> int | None:
    """When the oldest pending delivery a worker could send now fell due: its endpoint enabled
    and not waiting out a backoff (a failing endpoint's wait is its backoff, not lag)."""
    due_since = case(
        (E.c.blocked_until_us > D.c.next_attempt_at_us, E.c.blocked_until_us), else_=D.c.next_attempt_at_us
    )
    query = (
        select(func.min(due_since))
        .select_from(D.join(E, (E.c.tenant_id == D.c.tenant_id) & (E.c.id == D.c.endpoint_id)))
        .where(
            D.c.status == PENDING,
            D.c.next_attempt_at_us <= now_us,
            E.c.status == ENABLED,
            or_(E.c.blocked_until_us.is_(None), E.c.blocked_until_us <= now_us),
        )
    )
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


def failing_endpoints(connection: Connection, tenant_id: str | None, *, limit: int) -> list[Row[Any]]:
    """Endpoints failing now (a failure record) or disabled, oldest failure first."""
    query = select(E).where(or_(E.c.failing_since_us.is_not(None), E.c.status == DISABLED), E.c.status != "deleted")
    if tenant_id is not None:
        query = query.where(E.c.tenant_id == tenant_id)
    return list(connection.execute(query.order_by(E.c.failing_since_us, E.c.id).limit(limit)))


def endpoints_of_any(
    connection: Connection, tenant_id: str | None, *, statuses: Sequence[str], after: tuple[str, str] | None, limit: int
) -> list[Row[Any]]:
    """Endpoints of one tenant or every one, in (tenant_id, id) order, after (tenant_id, id)."""
    query = select(E).where(E.c.status.in_(list(statuses)))
    if tenant_id is not None:
        query = query.where(E.c.tenant_id == tenant_id)
    if after is not None:
        query = query.where(or_(E.c.tenant_id > after[0], and_(E.c.tenant_id == after[0], E.c.id > after[1])))
    return list(connection.execute(query.order_by(E.c.tenant_id, E.c.id).limit(limit)))


def failing_deliveries(
    connection: Connection,
    tenant_id: str | None,
    *,
    endpoint_id: str | None,
    statuses: Sequence[str],
    after: tuple[str, str] | None,
    limit: int,
) -> list[Row[Any]]:
    """Deliveries that failed (`failed`), or are being retried (`pending` after an attempt), of
    one tenant or every one, the latest first ((id, tenant_id) descending: a delivery id
    starts with its event's time-ordered id), after (tenant_id, id)."""
    wanted = []
    if FAILED in statuses:
        wanted.append(D.c.status == FAILED)
    if PENDING in statuses:
        wanted.append(and_(D.c.status == PENDING, D.c.attempts > 0))
    query = select(D).where(or_(*wanted))
    if tenant_id is not None:
        query = query.where(D.c.tenant_id == tenant_id)
    if endpoint_id is not None:
        query = query.where(D.c.endpoint_id == endpoint_id)
    if after is not None:
        query = query.where(or_(D.c.id < after[1], and_(D.c.id == after[1], D.c.tenant_id < after[0])))
    return list(connection.execute(query.order_by(D.c.id.desc(), D.c.tenant_id.desc()).limit(limit)))


def endpoint_secrets(connection: Connection, *, after: tuple[str, str] | None, limit: int) -> list[Row[Any]]:
    """The next `limit` endpoints' secrets (every status), in (tenant_id, id) order."""
    query = select(E.c.tenant_id, E.c.id, E.c.secret, E.c.previous_secret)
    if after is not None:
        query = query.where(or_(E.c.tenant_id > after[0], and_(E.c.tenant_id == after[0], E.c.id > after[1])))
    return list(connection.execute(query.order_by(E.c.tenant_id, E.c.id).limit(limit)))


def replace_secrets(
    connection: Connection,
    tenant_id: str,
    endpoint_id: str,
    secret: str,
    previous_secret: str | None,
    values: Mapping[str, Any],
) -> bool:
    """Compare-and-set on an endpoint's two secrets: False if either changed since read."""
    statement = update(E).where(
        E.c.tenant_id == tenant_id,
        E.c.id == endpoint_id,
        E.c.secret == secret,
        E.c.previous_secret.is_not_distinct_from(previous_secret),
    )
    return connection.execute(statement.values(**values)).rowcount == 1


def count_endpoints(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(E)).scalar_one())
