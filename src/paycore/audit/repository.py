"""SQL for the audit log: insert and read, nothing else (the table is append-only)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, or_, select

from paycore.audit.models import events
from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.db.sql import filter_only, keys_in

_INSERT = insert(events)
# An object's audit log (its history) reads the columns every revision has: not the published
# event's sequence and snapshot (migration 0015), which `GET /v1/events` reads.
_AUDITED = [column for column in events.c if column.name not in ("object_sequence", "snapshot")]
_OF_OBJECT = (
    select(*_AUDITED)
    .where(events.c.tenant_id == bindparam("t"), events.c.object_id == bindparam("o"))
    .order_by(events.c.created_at_us, events.c.id)
    .limit(bindparam("n"))
)


# A published state change numbered in its own INSERT: one more than the object's last
# published state change (no statement of its own on the money path). Two changes of one
# object never race here: the second waits on the first's compare-and-set row lock. Only
# published state changes carry a sequence (`service._insert`), so the largest of the object's
# is the last one's, with no condition on `kind`: with one, (tenant_id, kind) was as good a
# search to a planner as (tenant_id, object_id), and PostgreSQL's generic plan, on statistics
# gathered while the table was small, read every state change of the tenant
# (tests/integration/plans/ checks every plan of the money path).
#
# INSERT ... SELECT, not a subquery in VALUES: the same row and plan on one PostgreSQL, and the
# form Citus accepts on a table distributed by tenant ("subqueries are not supported within
# INSERT queries" otherwise; ADR 0031). An aggregate without GROUP BY is always one row.
_NUMBERED_COLUMNS = [column for column in events.c if column.name != "object_sequence"]
_NEXT = select(
    *(bindparam(column.name, type_=column.type) for column in _NUMBERED_COLUMNS),
    func.coalesce(func.max(events.c.object_sequence), 0) + 1,
).where(events.c.tenant_id == bindparam("seq_t"), events.c.object_id == bindparam("seq_o"))
_INSERT_NEXT = insert(events).from_select([*(column.name for column in _NUMBERED_COLUMNS), "object_sequence"], _NEXT)


def add(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT, values)


def add_next(connection: Connection, values: dict[str, Any]) -> None:
    """Insert a published state change numbered after the object's last one."""
    connection.execute(_INSERT_NEXT, {**values, "seq_t": values["tenant_id"], "seq_o": values["object_id"]})


def events_of(connection: Connection, tenant_id: str, object_id: str, limit: int) -> list[Row[Any]]:
    return list(connection.execute(_OF_OBJECT, {"t": tenant_id, "o": object_id, "n": limit}))


# The same read from the event loop, with no worker thread (a data-plane phase's on PostgreSQL,
# `db/loop_calls.py`): the same columns (`_AUDITED`), order and bound, as a driver statement.
_AUDITED_NAMES = tuple(column.name for column in _AUDITED)
_OF_OBJECT_ON_LOOP = driver.statement(
    f"SELECT {', '.join(_AUDITED_NAMES)} FROM events WHERE tenant_id = ? AND object_id = ?"
    " ORDER BY created_at_us, id LIMIT ?"
)


async def events_of_on_loop(database: Database, tenant_id: str, object_id: str, limit: int) -> list[dict[str, Any]]:
    """`events_of` from the event loop (PostgreSQL): each row by its column's name."""
    rows = await loop_calls.fetch(database, _OF_OBJECT_ON_LOOP, (tenant_id, object_id, limit), commits=False)
    return [dict(zip(_AUDITED_NAMES, row, strict=True)) for row in rows]


def first_state_change(connection: Connection, tenant_id: str, object_id: str) -> Row[Any] | None:
    query = (
        select(*_AUDITED)
        .where(
            events.c.tenant_id == tenant_id,
            events.c.object_id == object_id,
            filter_only(events.c.kind) == "state_change",
        )
        .order_by(events.c.created_at_us, events.c.id)
        .limit(1)
    )
    return connection.execute(query).first()


def evidence_of(connection: Connection, keys: list[tuple[str, str]]) -> list[Row[Any]]:
    """The processor calls and webhooks of these objects, oldest first (bounded by the caller's keys)."""
    if not keys:
        return []
    query = (
        select(*_AUDITED)
        .where(
            keys_in((events.c.tenant_id, events.c.object_id), keys),
            filter_only(events.c.kind).in_(("processor_call", "webhook")),
        )
        .order_by(events.c.created_at_us, events.c.id)
    )
    return list(connection.execute(query))


def of_types(connection: Connection, keys: list[tuple[str, str]], types: tuple[str, ...]) -> list[Row[Any]]:
    """The events of these types of these objects, oldest first (bounded by the caller's keys)."""
    if not keys:
        return []
    query = (
        select(*_AUDITED)
        .where(keys_in((events.c.tenant_id, events.c.object_id), keys), filter_only(events.c.type).in_(types))
        .order_by(events.c.created_at_us, events.c.id)
    )
    return list(connection.execute(query))


def changed_by_cause(connection: Connection, keys: list[tuple[str, str]], cause: str) -> set[tuple[str, str]]:
    if not keys:
        return set()
    query = select(events.c.tenant_id, events.c.object_id).where(
        keys_in((events.c.tenant_id, events.c.object_id), keys),
        filter_only(events.c.kind) == "state_change",
        events.c.cause == cause,
    )
    return {(row.tenant_id, row.object_id) for row in connection.execute(query)}


def published(connection: Connection, tenant_id: str, event_id: str) -> Row[Any] | None:
    """A published event of the tenant (or an unpublished state change of an older row)."""
    query = select(events).where(events.c.tenant_id == tenant_id, events.c.id == event_id, _PUBLISHED)
    return connection.execute(query).first()


def list_published(
    connection: Connection,
    tenant_id: str,
    *,
    type: str | None,
    object_type: str | None,
    object_id: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Row[Any]]:
    query = select(events).where(events.c.tenant_id == tenant_id, _PUBLISHED)
    if type is not None:
        query = query.where(events.c.type == type)
    if object_type is not None:
        query = query.where(events.c.object_type == object_type)
    if object_id is not None:
        query = query.where(events.c.object_id == object_id)
    if starting_after is not None:
        query = query.where(events.c.id > starting_after)
    return list(connection.execute(query.order_by(events.c.id).limit(limit)))


# Published: carries a sequence (migration 0015 on), or a state change written before it.
_PUBLISHED = or_(events.c.object_sequence.is_not(None), events.c.kind == "state_change")


def get_many(connection: Connection, tenant_id: str, event_ids: list[str]) -> list[Row[Any]]:
    if not event_ids:
        return []
    return list(connection.execute(select(events).where(events.c.tenant_id == tenant_id, events.c.id.in_(event_ids))))


@dataclass(frozen=True)
class AuditFilter:
    """What `GET /v1/audit_events` and the console's audit page filter on; None: any."""

    tenant_id: str | None = None  # None: every tenant (the platform's staff), `*` rows included
    type: str | None = None
    object_id: str | None = None
    actor: str | None = None
    outcome: str | None = None  # an API call's, a processor call's, a webhook's result (`cause`)
    created_gte_us: int | None = None
    created_lt_us: int | None = None
    idempotency_key: str | None = None  # an API call's (a refused request's too)


_OUTCOME_KINDS = ("api_call", "processor_call", "webhook")


def audit_page(connection: Connection, where: AuditFilter, *, starting_after: str | None, limit: int) -> list[Row[Any]]:
    """Audit events newest first (the audit log is read from the latest), after `starting_after`."""
    table = events.c
    query = select(*_AUDITED)
    if where.tenant_id is not None:
        query = query.where(table.tenant_id == where.tenant_id)
    for column, value in ((table.type, where.type), (table.object_id, where.object_id), (table.actor, where.actor)):
        if value is not None:
            query = query.where(column == value)
    if where.outcome is not None:
        query = query.where(table.kind.in_(_OUTCOME_KINDS), table.cause == where.outcome)
    if where.created_gte_us is not None:
        query = query.where(table.created_at_us >= where.created_gte_us)
    if where.created_lt_us is not None:
        query = query.where(table.created_at_us < where.created_lt_us)
    if where.idempotency_key is not None:
        # The data is JSON written with sorted keys and no spaces: the key's member is this text.
        member = '"idempotency_key":' + json.dumps(where.idempotency_key)
        escaped = member.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(table.data.like(f"%{escaped}%", escape="\\"))
    if starting_after is not None:
        query = query.where(table.id < starting_after)
    return list(connection.execute(query.order_by(table.id.desc()).limit(limit)))


def audit_event(connection: Connection, tenant_id: str | None, event_id: str) -> Row[Any] | None:
    query = select(*_AUDITED).where(events.c.id == event_id)
    if tenant_id is not None:
        query = query.where(events.c.tenant_id == tenant_id)
    return connection.execute(query).first()
