"""Outgoing webhooks (SPEC §10.1, ADR 0015): a tenant's endpoints, the deliveries and
attempts the tenant can see, and redelivery. The worker round that POSTs lives in `rounds`; the
helper a receiver checks signatures with in `verify`.

An endpoint's signing secrets (`secret`, `previous_secret`) are stored sealed (`paycore.keyring`,
ADR 0018), and so is the secret in the stored answer of the request that made it: the endpoint
hands the sealed value around, and only `signing_secrets` (the worker) and `shown_answer` (the
answer to its request) open it; both live in `secrets.py`, with the resealing of `paycore secrets
rotate`, and are exported here.

A published event is queued for the tenant's enabled endpoints that take its type by the
database itself, in the INSERT of the event (the trigger `events_publish` of migration 0015):
one delivery per endpoint, id `whd_<event ULID><endpoint ULID>`, due at once. `takes` below is
the same rule, for a redelivery; a test holds the two to each other.

Every function runs in the caller's transaction."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.keyring import Keyring
from paycore.kit import ids
from paycore.kit.errors import InvalidStartingAfter
from paycore.operators import service as operators
from paycore.webhooks import repository, states, urls
from paycore.webhooks.errors import EndpointNotFound, EventNotFound, InvalidEventTypes
from paycore.webhooks.events import ALL, EVENT_TYPES
from paycore.webhooks.secrets import ANSWER_MARKER as ANSWER_MARKER
from paycore.webhooks.secrets import SECRET_PREFIX as SECRET_PREFIX
from paycore.webhooks.secrets import Resealed as Resealed
from paycore.webhooks.secrets import new_secret, sealed
from paycore.webhooks.secrets import reseal_answers as reseal_answers
from paycore.webhooks.secrets import reseal_endpoints as reseal_endpoints
from paycore.webhooks.secrets import shown_answer as shown_answer
from paycore.webhooks.secrets import signing_secrets as signing_secrets
from paycore.webhooks.types import Attempt, Delivery, Endpoint

log = logging.getLogger(__name__)
EVENTS_MAX = len(EVENT_TYPES) + 1
DESCRIPTION_LENGTH_MAX = 1000
ATTEMPTS_SHOWN_MAX = 1000


@dataclass(frozen=True)
class NewEndpoint:
    endpoint: Endpoint  # its `secret` sealed, as stored: what the answer stores too
    secret: str  # in clear: shown once, in the creating (or rotating) answer


def local_mode(connection: Connection) -> bool:
    """No API key and no operator exist yet (SPEC §3.2): loopback endpoints over http are allowed."""
    return operators.local_mode(connection)


def check_events(events: Sequence[str]) -> tuple[str, ...]:
    """The types an endpoint takes: `["*"]` (everything) or known types, deduplicated."""
    if not events or len(events) > EVENTS_MAX:
        raise InvalidEventTypes(f'events must list 1 to {EVENTS_MAX} event types, or ["*"]', param="events")
    unknown = sorted({event for event in events if event != ALL and event not in EVENT_TYPES})
    if unknown:
        raise InvalidEventTypes(f"unknown event types: {', '.join(unknown[:5])} (see docs/webhooks.md)", param="events")
    if ALL in events:
        return (ALL,)
    return tuple(dict.fromkeys(events))


def create_endpoint(
    connection: Connection,
    tenant_id: str,
    *,
    keyring: Keyring,
    url: str,
    events: Sequence[str],
    description: str | None,
    now_us: int,
) -> NewEndpoint:
    checked_url = urls.check_url(url, local_mode=local_mode(connection))
    endpoint_id = ids.new_id("we")
    secret = new_secret()
    values = {
        "tenant_id": tenant_id,
        "id": endpoint_id,
        "url": checked_url,
        "events": json.dumps(list(check_events(events))),
        "description": description,
        "status": states.ENABLED,
        "disabled_reason": None,
        "secret": sealed(keyring, tenant_id, endpoint_id, secret),
        "previous_secret": None,
        "previous_secret_until_us": None,
        "failures": 0,
        "failing_since_us": None,
        "last_error": None,
        "blocked_until_us": None,
        "claimed_by": None,
        "claimed_until_us": None,
        "served_at_us": None,
        "created_at_us": now_us,
        "updated_at_us": now_us,
    }
    repository.insert_endpoint(connection, values)
    return NewEndpoint(endpoint_from_row(values), secret)


def get_endpoint(connection: Connection, tenant_id: str, endpoint_id: str, *, for_update: bool = False) -> Endpoint:
    row = repository.get_endpoint(connection, tenant_id, endpoint_id, for_update=for_update)
    if row is None or row.status == states.DELETED:
        raise EndpointNotFound("no such webhook endpoint", param="id")
    return endpoint_from_row(row._mapping)


def list_endpoints(connection: Connection, tenant_id: str, *, starting_after: str | None, limit: int) -> list[Endpoint]:
    live = (states.ENABLED, states.DISABLED)
    if starting_after is not None:
        found = repository.get_endpoint(connection, tenant_id, starting_after)
        if found is None or found.status not in live:
            raise InvalidStartingAfter("starting_after is not an endpoint of this list", param="starting_after")
    rows = repository.list_endpoints(connection, tenant_id, statuses=live, starting_after=starting_after, limit=limit)
    return [endpoint_from_row(row._mapping) for row in rows]


def update_endpoint(
    connection: Connection,
    tenant_id: str,
    endpoint_id: str,
    *,
    changes: dict[str, Any],
    actor: str,
    now_us: int,
) -> Endpoint:
    """Change `url`, `events`, `description` or `disabled` (each only if given). Enabling an
    endpoint clears its failure record: its pending deliveries are due again at once."""
    current = get_endpoint(connection, tenant_id, endpoint_id, for_update=True)
    values: dict[str, Any] = {"updated_at_us": now_us}
    if changes.get("url") is not None:
        values["url"] = urls.check_url(changes["url"], local_mode=local_mode(connection))
    if changes.get("events") is not None:
        values["events"] = json.dumps(list(check_events(changes["events"])))
    if "description" in changes:
        values["description"] = changes["description"]
    disabled = changes.get("disabled")
    if disabled is True and current.status == states.ENABLED:
        values.update(status=states.DISABLED, disabled_reason="disabled by the tenant")
    elif disabled is False and current.status == states.DISABLED:
        values.update(healthy_values(), status=states.ENABLED, disabled_reason=None)
    status = values.pop("status", None)
    repository.update_endpoint(connection, tenant_id, endpoint_id, values)
    if status is not None:
        changed = change_endpoint_status(connection, current, status, cause="tenant", actor=actor, now_us=now_us)
        assert changed, "the endpoint is row-locked (PostgreSQL) or the writer's (SQLite) since it was read"
    return get_endpoint(connection, tenant_id, endpoint_id)


def delete_endpoint(connection: Connection, tenant_id: str, endpoint_id: str, *, actor: str, now_us: int) -> Endpoint:
    """The endpoint is gone for the tenant (404 from now on); its pending deliveries are canceled."""
    current = get_endpoint(connection, tenant_id, endpoint_id, for_update=True)
    repository.cancel_pending(connection, tenant_id, endpoint_id, {"next_attempt_at_us": None, "updated_at_us": now_us})
    deleted = change_endpoint_status(
        connection,
        current,
        states.DELETED,
        cause="tenant",
        actor=actor,
        now_us=now_us,
        values={"updated_at_us": now_us},
    )
    assert deleted, "the endpoint is row-locked (PostgreSQL) or the writer's (SQLite) since it was read"
    return dataclasses.replace(current, status=states.DELETED, updated_at_us=now_us)


def rotate_secret(
    connection: Connection, tenant_id: str, endpoint_id: str, *, keyring: Keyring, overlap_ms: int, now_us: int
) -> NewEndpoint:
    """A new signing secret; the current one keeps signing beside it for `overlap_ms` (every
    delivery in the overlap carries two `v1=` signatures), then only the new one signs. The
    current one moves as it is stored: sealed for this endpoint, it opens in either column."""
    current = get_endpoint(connection, tenant_id, endpoint_id, for_update=True)
    secret = new_secret()
    values = {
        "secret": sealed(keyring, tenant_id, endpoint_id, secret),
        "previous_secret": current.secret,
        "previous_secret_until_us": now_us + overlap_ms * 1000,
        "updated_at_us": now_us,
    }
    repository.update_endpoint(connection, tenant_id, endpoint_id, values)
    return NewEndpoint(get_endpoint(connection, tenant_id, endpoint_id), secret)


def get_event(connection: Connection, tenant_id: str, event_id: str) -> Event:
    event = audit.get_published(connection, tenant_id, event_id)
    if event is None:
        raise EventNotFound("no such event", param="id")
    return event


def deliveries_of(connection: Connection, tenant_id: str, event_id: str) -> tuple[list[Delivery], list[Attempt]]:
    """The event's deliveries (one per endpoint, more after a redelivery) and every attempt."""
    get_event(connection, tenant_id, event_id)
    deliveries = [
        delivery_from_row(row._mapping) for row in repository.deliveries_of_event(connection, tenant_id, event_id)
    ]
    attempts = repository.attempts_of_event(connection, tenant_id, event_id, ATTEMPTS_SHOWN_MAX)
    return deliveries, [Attempt(**row._mapping) for row in attempts]


def redeliver(connection: Connection, tenant_id: str, event_id: str, *, actor: str, now_us: int) -> list[Delivery]:
    """Send the event again, now, to every enabled endpoint that takes its type: a new delivery
    each (a new delivery id: the receiver sees a deliberate resend), its endpoint's own backoff
    lifted so that the attempt is not held back."""
    event = get_event(connection, tenant_id, event_id)
    rows = []
    for endpoint in repository.enabled_endpoints(connection, tenant_id):
        if _takes(endpoint.events, event.type):
            rows.append(_delivery_values(tenant_id, event_id, endpoint.id, now_us))
            repository.update_endpoint(connection, tenant_id, endpoint.id, {"blocked_until_us": None})
    repository.insert_deliveries(connection, rows)
    audit.record_other(
        connection,
        tenant_id,
        kind="note",
        type="event.redelivered",
        object_type=event.object_type,
        object_id=event.object_id,
        cause="redeliver",
        actor=actor,
        now_us=now_us,
        data={"event_id": event_id, "deliveries": [row["id"] for row in rows]},
    )
    return [delivery_from_row(row) for row in rows]


@dataclass(frozen=True)
class Health:
    """The webhook gauges, over every tenant."""

    attempts_by_outcome: dict[str, int]
    oldest_pending_us: list[tuple[str, str, int]]  # (tenant, endpoint, created_at_us of its oldest pending)
    disabled_endpoints: int


def health(connection: Connection) -> Health:
    oldest = [(row.tenant_id, row.endpoint_id, int(row.oldest_us)) for row in repository.oldest_pending(connection)]
    return Health(repository.attempts_by_outcome(connection), oldest, repository.count_disabled(connection))


FAILING_ENDPOINTS_MAX = 100  # the console's list of failing endpoints


def oldest_due_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest delivery a worker could send now fell due (the delivery job's lag)."""
    return repository.oldest_due_us(connection, now_us)


def failing_endpoints(connection: Connection, tenant_id: str | None) -> list[Endpoint]:
    """Endpoints failing now or disabled, of one tenant or every one, oldest failure first."""
    rows = repository.failing_endpoints(connection, tenant_id, limit=FAILING_ENDPOINTS_MAX)
    return [endpoint_from_row(row._mapping) for row in rows]


FAILING_STATUSES = (states.FAILED, states.PENDING)  # failed; pending after a failed attempt: retrying


def endpoints_of_any(
    connection: Connection, tenant_id: str | None, *, starting_after: tuple[str, str] | None, limit: int
) -> list[Endpoint]:
    """Live endpoints (enabled or disabled) of one tenant or every one (None), in (tenant, id)
    order; `starting_after` is the (tenant, id) of the previous page's last one."""
    live = (states.ENABLED, states.DISABLED)
    if starting_after is not None:
        found = repository.get_endpoint(connection, *starting_after)
        if found is None or found.status not in live or tenant_id not in (None, starting_after[0]):
            raise InvalidStartingAfter("starting_after is not an endpoint of this list", param="starting_after")
    rows = repository.endpoints_of_any(connection, tenant_id, statuses=live, after=starting_after, limit=limit)
    return [endpoint_from_row(row._mapping) for row in rows]


def failing_deliveries(
    connection: Connection,
    tenant_id: str | None,
    *,
    endpoint_id: str | None = None,
    statuses: Sequence[str] = FAILING_STATUSES,
    starting_after: tuple[str, str] | None,
    limit: int,
) -> list[Delivery]:
    """Deliveries given up (`failed`) or being retried (`pending` after a failed attempt), of
    one tenant or every one, the latest first, each with its last error; `starting_after` is
    the (tenant, id) of the previous page's last one."""
    assert set(statuses) <= set(FAILING_STATUSES) and statuses, statuses
    if starting_after is not None:
        found = repository.get_delivery(connection, *starting_after)
        if found is None or tenant_id not in (None, starting_after[0]):
            raise InvalidStartingAfter("starting_after is not a delivery of this list", param="starting_after")
    rows = repository.failing_deliveries(
        connection, tenant_id, endpoint_id=endpoint_id, statuses=statuses, after=starting_after, limit=limit
    )
    return [delivery_from_row(row._mapping) for row in rows]


def endpoint_from_row(row: Any) -> Endpoint:
    values = dict(row)
    values["events"] = tuple(json.loads(values["events"]))
    return Endpoint(**values)


def delivery_from_row(row: Any) -> Delivery:
    return Delivery(**dict(row))


def _takes(events_json: str, event_type: str) -> bool:
    """Whether an endpoint's stored `events` (JSON) take a type: the trigger's rule."""
    events = json.loads(events_json)
    return ALL in events or event_type in events


def _delivery_values(tenant_id: str, event_id: str, endpoint_id: str, now_us: int) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "id": ids.new_id("whd"),
        "event_id": event_id,
        "endpoint_id": endpoint_id,
        "status": states.PENDING,
        "attempts": 0,
        "next_attempt_at_us": now_us,
        "last_status_code": None,
        "last_error": None,
        "delivered_at_us": None,
        "created_at_us": now_us,
        "updated_at_us": now_us,
    }


def healthy_values() -> dict[str, Any]:
    """An endpoint's failure record cleared (a 2xx answer, or the tenant enabling it)."""
    return {"failures": 0, "failing_since_us": None, "last_error": None, "blocked_until_us": None}


def count_endpoints(connection: Connection) -> int:
    """Every endpoint row, deleted ones included (their secrets are at rest too)."""
    return repository.count_endpoints(connection)


def change_endpoint_status(
    connection: Connection,
    endpoint: Endpoint,
    to_status: str,
    *,
    cause: str,
    actor: str,
    now_us: int,
    values: dict[str, Any] | None = None,
) -> bool:
    """An endpoint (as read in this transaction) to `to_status`, with `values` beside it: the
    lifecycle's status change (a compare-and-set on the status read), recorded on the
    endpoint's audit log. False when its status changed since it was read: nothing written."""

    def record(count: int) -> None:
        _record_endpoint_change(connection, endpoint, to_status, cause=cause, actor=actor, now_us=now_us)

    key, move = (endpoint.tenant_id, endpoint.id), (endpoint.status, to_status)
    return repository.change_endpoint(connection, key, move, values or {}, record=record)


def _record_endpoint_change(
    connection: Connection, endpoint: Endpoint, to_status: str, *, cause: str, actor: str, now_us: int
) -> None:
    """An endpoint's status change, on its audit log (a `note`: endpoints are not published)."""
    audit.record_other(
        connection,
        endpoint.tenant_id,
        kind="note",
        type=f"webhook_endpoint.{to_status}",
        object_type="webhook_endpoint",
        object_id=endpoint.id,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data={"from": endpoint.status, "to": to_status},
    )
