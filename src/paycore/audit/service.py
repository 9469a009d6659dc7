"""Write and read the audit log. Every function runs in the caller's transaction, so an
event commits together with the change it records, or not at all (but `events_of_on_loop`, a
read on the event loop's own connection: a data-plane phase's on PostgreSQL, ADR 0026). An
event's data carries the `request_id` of the request (or worker job run) that caused it, when
one is set. The rows themselves are built in `audit.rows`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import repository
from paycore.audit.rows import EventContext, api_call_row, event_row, processor_call_row, state_change_row, webhook_row
from paycore.db.engine import Database
from paycore.kit import ids
from paycore.kit.errors import InvalidStartingAfter


@dataclass(frozen=True)
class Event:
    id: str
    kind: str
    type: str
    object_type: str
    object_id: str
    from_state: str | None
    to_state: str | None
    cause: str
    actor: str
    data: dict[str, Any]
    created_at_us: int
    sequence: int | None = None  # published events only (ADR 0015)
    snapshot: dict[str, Any] | None = None  # the object after the change; published events only


def record_state_change(
    connection: Connection,
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    from_state: str | None,
    to_state: str,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
    snapshot: dict[str, Any] | None = None,
) -> str:
    """One transition of a money object; its type (`payment.succeeded`) is the tenant's event.
    With `snapshot` (the object after the change) it is published: numbered 1 at the object's
    birth (no `from_state`), one more than the object's last published change otherwise, and
    queued for the tenant's webhook endpoints, all by the one INSERT."""
    row = state_change_row(
        tenant_id,
        event_id=ids.new_id("evt"),
        context=EventContext.current(),
        object_type=object_type,
        object_id=object_id,
        from_state=from_state,
        to_state=to_state,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data,
        snapshot=snapshot,
    )
    write(connection, row)
    return str(row["id"])


def record_processor_call(
    connection: Connection,
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    operation: str,
    request: dict[str, Any],
    outcome: dict[str, Any],
    latency_ms: int,
    actor: str,
    now_us: int,
    attempt: int | None = None,
) -> str:
    """One call to the processor: what was sent, what came back (or the error), how long it
    took, and (for payouts) which attempt it was."""
    row = processor_call_row(
        tenant_id,
        event_id=ids.new_id("evt"),
        context=EventContext.current(),
        object_type=object_type,
        object_id=object_id,
        operation=operation,
        request=request,
        outcome=outcome,
        latency_ms=latency_ms,
        actor=actor,
        now_us=now_us,
        attempt=attempt,
    )
    write(connection, row)
    return str(row["id"])


def record_webhook(
    connection: Connection,
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    event_type: str,
    result: str,
    payload: dict[str, Any],
    now_us: int,
) -> str:
    """One webhook from the processor on the audit log of the object it names, with what
    paycore made of it (`result`)."""
    row = webhook_row(
        tenant_id,
        event_id=ids.new_id("evt"),
        context=EventContext.current(),
        object_type=object_type,
        object_id=object_id,
        event_type=event_type,
        result=result,
        payload=payload,
        now_us=now_us,
    )
    write(connection, row)
    return str(row["id"])


def record_api_call(
    connection: Connection,
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    operation: str,
    status: int,
    outcome: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
) -> str:
    """The result of one API request, accepted or refused (SPEC §11 audit log)."""
    event_id = ids.new_id("evt")
    row = api_call_row(
        tenant_id,
        event_id=event_id,
        context=EventContext.current(),
        object_type=object_type,
        object_id=object_id,
        operation=operation,
        status=status,
        outcome=outcome,
        actor=actor,
        now_us=now_us,
        data=data,
    )
    write(connection, row)
    return event_id


def record_access(
    connection: Connection,
    tenant_id: str,
    *,
    type: str,
    object_type: str,
    object_id: str,
    outcome: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
) -> str:
    """A person's access to the console (`operator.login`, `operator.login_failed`,
    `operator.logout`) or a change of who may use it (`operator.created`, `operator.disabled`):
    an `api_call` event whose cause is its outcome."""
    return _insert(
        connection,
        tenant_id,
        kind="api_call",
        type=type,
        object_type=object_type,
        object_id=object_id,
        from_state=None,
        to_state=None,
        cause=outcome,
        actor=actor,
        now_us=now_us,
        data=data or {},
    )


def record_other(
    connection: Connection,
    tenant_id: str,
    *,
    kind: str,
    type: str,
    object_type: str,
    object_id: str,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
    published: tuple[int, dict[str, Any]] | None = None,
) -> str:
    """An `adjustment` (money moved for an object, its state unchanged) or a `note` (a
    decision recorded without a change). `published`: (sequence, snapshot) of a note the
    tenant hears about (a reconciliation break's events, numbered by the break)."""
    assert kind in ("adjustment", "note"), kind
    return _insert(
        connection,
        tenant_id,
        kind=kind,
        type=type,
        object_type=object_type,
        object_id=object_id,
        from_state=None,
        to_state=None,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data or {},
        sequence=None if published is None else published[0],
        snapshot=None if published is None else published[1],
    )


def events_of(connection: Connection, tenant_id: str, object_id: str, *, limit: int) -> list[Event]:
    return [_event(row) for row in repository.events_of(connection, tenant_id, object_id, limit)]


async def events_of_on_loop(database: Database, tenant_id: str, object_id: str, *, limit: int) -> list[Event]:
    """`events_of` from the event loop, with no worker thread (PostgreSQL, `db/loop_calls.py`)."""
    rows = await repository.events_of_on_loop(database, tenant_id, object_id, limit)
    return [_event_of(row) for row in rows]


def first_state_change(connection: Connection, tenant_id: str, object_id: str) -> Event | None:
    """The object's birth event (its first state change): who made it, when, why."""
    row = repository.first_state_change(connection, tenant_id, object_id)
    return None if row is None else _event(row)


def calls_summary(connection: Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, Event]]:
    """For each (tenant_id, object_id): how many calls to the processor and webhooks from it
    the object has, and the last of them (the evidence so far of an item in doubt)."""
    found: dict[tuple[str, str], tuple[int, Event]] = {}
    for row in repository.evidence_of(connection, keys):
        key = (row.tenant_id, row.object_id)
        count = found[key][0] + 1 if key in found else 1
        found[key] = (count, _event(row))  # rows come oldest first: the last one stays
    return found


def of_types(connection: Connection, keys: list[tuple[str, str]], types: tuple[str, ...]) -> list[Event]:
    """The events of `types` of these (tenant_id, object_id), oldest first (one statement)."""
    return [_event(row) for row in repository.of_types(connection, keys, types)]


def resolved_by_cause(connection: Connection, keys: list[tuple[str, str]], cause: str) -> set[tuple[str, str]]:
    """The (tenant_id, object_id) among `keys` with a state change of this cause (e.g. the
    items a person resolved by hand: `manual_resolution`)."""
    return repository.changed_by_cause(connection, keys, cause)


def get_published(connection: Connection, tenant_id: str, event_id: str) -> Event | None:
    row = repository.published(connection, tenant_id, event_id)
    return None if row is None else _event(row)


def get_many(connection: Connection, tenant_id: str, event_ids: list[str]) -> dict[str, Event]:
    """The tenant's events with these ids that exist, by id (one statement)."""
    return {row.id: _event(row) for row in repository.get_many(connection, tenant_id, event_ids)}


def list_published(
    connection: Connection,
    tenant_id: str,
    *,
    type: str | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    starting_after: str | None,
    limit: int,
) -> list[Event]:
    """The tenant's published events (`GET /v1/events`), oldest first. `starting_after` is one
    of them; anything else is refused."""
    if starting_after is not None and repository.published(connection, tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not an event of this list", param="starting_after")
    rows = repository.list_published(
        connection,
        tenant_id,
        type=type,
        object_type=object_type,
        object_id=object_id,
        starting_after=starting_after,
        limit=limit,
    )
    return [_event(row) for row in rows]


AuditFilter = repository.AuditFilter


def audit_page(connection: Connection, where: AuditFilter, *, starting_after: str | None, limit: int) -> list[Event]:
    """The audit log, newest first: every state change, call, webhook, API result (refused
    requests too), person's action and sign-in, filtered by `where`. `starting_after` is an
    event of the same scope; anything else is refused."""
    if starting_after is not None and repository.audit_event(connection, where.tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not an audit event of this list", param="starting_after")
    return [_event(row) for row in repository.audit_page(connection, where, starting_after=starting_after, limit=limit)]


def _insert(
    connection: Connection,
    tenant_id: str,
    *,
    data: dict[str, Any],
    now_us: int,
    snapshot: dict[str, Any] | None = None,
    sequence: int | None = None,
    **values: Any,
) -> str:
    event_id = ids.new_id("evt")
    row = event_row(
        tenant_id,
        event_id=event_id,
        context=EventContext.current(),
        data=data,
        now_us=now_us,
        snapshot=snapshot,
        sequence=sequence,
        **values,
    )
    write(connection, row)
    return event_id


def write(connection: Connection, row: dict[str, Any]) -> None:
    """Insert an event's row (`event_row`), in the caller's transaction. A published one (with
    a snapshot) is queued by the database's trigger (migration 0015) for the tenant's webhook
    endpoints that take its type, in this INSERT (docs/adr/0015-outgoing-webhooks.md); one
    without its sequence is numbered after the object's last by the INSERT itself."""
    if "snapshot" in row and "object_sequence" not in row:
        repository.add_next(connection, row)
    else:  # unpublished (only the columns every revision has), or numbered already
        repository.add(connection, row)


def _event(row: Any) -> Event:
    return _event_of(row._mapping)


def _event_of(row: Mapping[str, Any]) -> Event:
    """The event a row means, by its columns' names (a Core row's mapping, or a driver row's)."""
    return Event(
        id=row["id"],
        kind=row["kind"],
        type=row["type"],
        object_type=row["object_type"],
        object_id=row["object_id"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        cause=row["cause"],
        actor=row["actor"],
        data=json.loads(row["data"]),
        created_at_us=row["created_at_us"],
        sequence=row.get("object_sequence"),
        snapshot=None if row.get("snapshot") is None else json.loads(row["snapshot"]),
    )
