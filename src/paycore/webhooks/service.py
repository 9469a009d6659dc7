"""Outgoing webhooks (SPEC §10.1, ADR 0015): a tenant's endpoints, the deliveries and
attempts the tenant can see, and redelivery. The worker round that POSTs lives in `jobs`; the
helper a receiver checks signatures with in `verify`.

An endpoint's signing secrets (`secret`, `previous_secret`) are stored sealed (`paycore.keyring`,
ADR 0018), and so is the secret in the stored answer of the request that made it: the endpoint
hands the sealed value around, and only `signing_secrets` (the worker) and `shown_answer` (the
answer to its request) open it.

A published event is queued for the tenant's enabled endpoints that take its type by the
database itself, in the INSERT of the event (the trigger `events_publish` of migration 0015):
one delivery per endpoint, id `whd_<event ULID><endpoint ULID>`, due at once. `takes` below is
the same rule, for a redelivery; a test holds the two to each other.

Every function runs in the caller's transaction."""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.idempotency import service as idempotency
from paycore.keyring import Keyring, SecretUnreadable, is_sealed
from paycore.kit import ids
from paycore.kit.errors import InvalidStartingAfter
from paycore.operators import service as operators
from paycore.webhooks import repository, states, urls
from paycore.webhooks.errors import EndpointNotFound, EventNotFound, InvalidEventTypes
from paycore.webhooks.events import ALL, EVENT_TYPES
from paycore.webhooks.models import SECRET_LENGTH
from paycore.webhooks.types import Attempt, Delivery, Endpoint

log = logging.getLogger(__name__)
SECRET_PREFIX = "whsec_"
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
    secret = _new_secret()
    values = {
        "tenant_id": tenant_id,
        "id": endpoint_id,
        "url": checked_url,
        "events": json.dumps(list(check_events(events))),
        "description": description,
        "status": states.ENABLED,
        "disabled_reason": None,
        "secret": _sealed(keyring, tenant_id, endpoint_id, secret),
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
    secret = _new_secret()
    values = {
        "secret": _sealed(keyring, tenant_id, endpoint_id, secret),
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


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


# ------------------------------------------------------------------ secrets at rest (ADR 0018)


def _secret_context(tenant_id: str, endpoint_id: str) -> str:
    """What a sealed secret is bound to: its endpoint (either column, and the stored answer)."""
    return f"webhook_endpoint:{tenant_id}:{endpoint_id}"


def _sealed(keyring: Keyring, tenant_id: str, endpoint_id: str, secret: str) -> str:
    sealed = keyring.seal(secret, _secret_context(tenant_id, endpoint_id))
    assert len(sealed) <= SECRET_LENGTH, "a sealed secret fits its column (migration 0015)"
    return sealed


def signing_secrets(keyring: Keyring, endpoint: Endpoint, now_us: int) -> tuple[str, ...]:
    """The secrets a delivery is signed with now (`Endpoint.secrets`), opened. Raises
    SecretUnreadable when the current one does not open (PAYCORE_SECRETS_KEY lacks its key); a
    previous one that does not open is left out, so that a tenant's `rotate_secret` after a key
    was lost brings its deliveries back at once."""
    context = _secret_context(endpoint.tenant_id, endpoint.id)
    current, *previous = endpoint.secrets(now_us)
    opened = [keyring.open(current, context)]
    for stored in previous:
        try:
            opened.append(keyring.open(stored, context))
        except SecretUnreadable as error:
            log.warning(
                "webhook endpoint %s: its previous signing secret cannot be opened (%s); signing with the current one",
                endpoint.id,
                error,
                extra={
                    "event": "webhook_secret_unreadable",
                    "tenant_id": endpoint.tenant_id,
                    "endpoint_id": endpoint.id,
                },
            )
    return tuple(opened)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)  # as the HTTP layer writes answers


def _answer_secret(body: str) -> tuple[dict[str, Any], str] | None:
    """(the answer, its endpoint's id) if the stored answer is an endpoint with its secret."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("object") != "webhook_endpoint":
        return None
    endpoint_id, secret = answer.get("id"), answer.get("secret")
    if not isinstance(endpoint_id, str) or not isinstance(secret, str):
        return None
    return answer, endpoint_id


def shown_answer(keyring: Keyring, tenant_id: str, body: str) -> str:
    """The answer of a request that made a secret (create, rotate_secret), as the client sees it:
    the stored answer holds the secret sealed; this opens it. Any other answer is unchanged."""
    found = _answer_secret(body)
    if found is None:
        return body
    answer, endpoint_id = found
    answer["secret"] = keyring.open(answer["secret"], _secret_context(tenant_id, endpoint_id))
    return _dumps(answer)


@dataclass(frozen=True)
class Resealed:
    """One batch of `paycore secrets rotate`: what it looked at and what it did."""

    examined: int  # rows read: endpoints, or stored answers
    resealed: int  # secrets sealed again under the newest key
    in_clear: int  # of those, written in clear before ADR 0018
    unreadable: int  # sealed under a key PAYCORE_SECRETS_KEY lacks: left as they are
    changed: int  # changed by a request while this batch ran: left to that request (run again to see)
    after: tuple[str, str] | None  # where the next batch starts; None: done


def reseal_endpoints(
    connection: Connection, keyring: Keyring, *, after: tuple[str, str] | None, limit: int
) -> Resealed:
    """Seal the secrets of the next `limit` endpoints (by tenant and id, every status) under the
    newest key, those in clear included. A row changes only if its secrets are still the ones
    read: a rotation by its tenant meanwhile wins (it sealed its own)."""
    rows = repository.endpoint_secrets(connection, after=after, limit=limit)
    resealed = in_clear = unreadable = changed = 0
    for row in rows:
        context = _secret_context(row.tenant_id, row.id)
        values: dict[str, str] = {}
        for column in ("secret", "previous_secret"):
            stored = row._mapping[column]
            if stored is None or keyring.is_current(stored):
                continue
            try:
                values[column] = _sealed(keyring, row.tenant_id, row.id, keyring.open(stored, context))
            except SecretUnreadable:
                unreadable += 1
        if not values:
            continue
        if repository.replace_secrets(connection, row.tenant_id, row.id, row.secret, row.previous_secret, values):
            resealed += len(values)
            in_clear += sum(not is_sealed(row._mapping[column]) for column in values)
        else:
            changed += 1
    keys = [(row.tenant_id, row.id) for row in rows]
    return Resealed(len(rows), resealed, in_clear, unreadable, changed, _next(keys, limit))


ANSWER_MARKER = '"object":"webhook_endpoint"'  # in every stored answer that can hold a secret


def reseal_answers(connection: Connection, keyring: Keyring, *, after: tuple[str, str] | None, limit: int) -> Resealed:
    """Seal the secret in the stored answers among the next `limit` idempotency keys (creates
    and rotations of endpoints) under the newest key, those in clear included; an answer
    changes only if it is still the one read."""
    answers = idempotency.stored_answers(connection, after=after, limit=limit, containing=ANSWER_MARKER)
    resealed = in_clear = unreadable = changed = 0
    for answer in answers:
        if answer.body is None:
            continue  # not an endpoint's answer: the database kept its body to itself
        found = _answer_secret(answer.body)
        if found is None or keyring.is_current(found[0]["secret"]):
            continue
        body, endpoint_id = found
        stored = body["secret"]
        try:
            opened = keyring.open(stored, _secret_context(answer.tenant_id, endpoint_id))
        except SecretUnreadable:
            unreadable += 1
            continue
        body["secret"] = _sealed(keyring, answer.tenant_id, endpoint_id, opened)
        if idempotency.replace_answer(connection, answer.tenant_id, answer.key, was=answer.body, now=_dumps(body)):
            resealed += 1
            in_clear += not is_sealed(stored)
        else:
            changed += 1
    keys = [(answer.tenant_id, answer.key) for answer in answers]
    return Resealed(len(answers), resealed, in_clear, unreadable, changed, _next(keys, limit))


def _next(keys: Sequence[tuple[str, str]], limit: int) -> tuple[str, str] | None:
    """Where the next page starts: after the last key of a full page; None after a short one."""
    return keys[-1] if len(keys) == limit else None


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
