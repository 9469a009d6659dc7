"""The outgoing webhooks' API shapes: the strict requests and the JSON of an endpoint, an
event as published, a delivery and an attempt (docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from paycore.audit.service import Event
from paycore.kit.clock import to_rfc3339
from paycore.schemas import StrictModel
from paycore.webhooks.events import EVENT_TYPES
from paycore.webhooks.service import DESCRIPTION_LENGTH_MAX, EVENTS_MAX
from paycore.webhooks.types import Attempt, Delivery, Endpoint
from paycore.webhooks.urls import URL_LENGTH_MAX

EventType = Annotated[str, StringConstraints(min_length=1, max_length=64)]


URL_RULES = (
    "Where paycore POSTs the events. Outside local mode: https only, no user name or password, no "
    "fragment, only characters RFC 3986 allows, and a host that is neither a loopback, private, "
    "link-local or otherwise internal address nor an internal name (docs/webhooks.md, the SSRF "
    "guard). Local mode adds loopback receivers (localhost, 127.0.0.0/8, [::1]), over http too; every "
    "other rule holds there. Refused: 400 invalid_webhook_url."
)
EVENTS_RULE = (
    f'["*"] (every type), or event types among: {", ".join(EVENT_TYPES)}. Another type: 400 invalid_event_types.'
)


class EndpointCreate(StrictModel):
    url: str = Field(min_length=1, max_length=URL_LENGTH_MAX, description=URL_RULES)
    events: list[EventType] = Field(min_length=1, max_length=EVENTS_MAX, description=EVENTS_RULE)
    description: str | None = Field(default=None, max_length=DESCRIPTION_LENGTH_MAX)


class EndpointUpdate(StrictModel):
    url: str | None = Field(default=None, min_length=1, max_length=URL_LENGTH_MAX, description=URL_RULES)
    events: list[EventType] | None = Field(default=None, min_length=1, max_length=EVENTS_MAX, description=EVENTS_RULE)
    description: str | None = Field(default=None, max_length=DESCRIPTION_LENGTH_MAX)
    disabled: bool | None = None


def _at(value_us: int | None) -> str | None:
    return None if value_us is None else to_rfc3339(value_us)


def endpoint_json(endpoint: Endpoint, *, secret: str | None = None, now_us: int) -> dict[str, Any]:
    """Never the secret, but in the answer that made it (`secret`, sealed as it is stored: the
    router opens it for the client, `service.shown_answer`)."""
    rotating = endpoint.previous_secret is not None and (endpoint.previous_secret_until_us or 0) > now_us
    body: dict[str, Any] = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "url": endpoint.url,
        "events": list(endpoint.events),
        "description": endpoint.description,
        "status": endpoint.status,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": _at(endpoint.failing_since_us),
        "consecutive_failures": endpoint.failures,
        "last_error": endpoint.last_error,
        "previous_secret_expires_at": _at(endpoint.previous_secret_until_us) if rotating else None,
        "created_at": to_rfc3339(endpoint.created_at_us),
        "updated_at": to_rfc3339(endpoint.updated_at_us),
    }
    if secret is not None:
        body["secret"] = secret
    return body


def published_json(event: Event) -> dict[str, Any]:
    """An event as `GET /v1/events` lists it: what a webhook delivers (`data`: the object as it
    was after the change; `sequence`: its order among the object's events), and where it comes
    from in the audit log (`kind`, `from`, `to`, `cause`, `actor`, `details`)."""
    data = event.snapshot
    if data is None:  # a state change written before events were published (migration 0015)
        data = {"id": event.object_id, "object": event.object_type, "status": event.to_state}
    return {
        "id": event.id,
        "object": "event",
        "type": event.type,
        "created_at": to_rfc3339(event.created_at_us),
        "sequence": event.sequence,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "data": data,
        "kind": event.kind,
        "from": event.from_state,
        "to": event.to_state,
        "cause": event.cause,
        "actor": event.actor,
        "details": event.data,
    }


def delivery_json(delivery: Delivery, attempts: list[Attempt]) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "object": "webhook_delivery",
        "event_id": delivery.event_id,
        "endpoint_id": delivery.endpoint_id,
        "status": delivery.status,
        "attempts_made": delivery.attempts,
        "next_attempt_at": _at(delivery.next_attempt_at_us),
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "delivered_at": _at(delivery.delivered_at_us),
        "created_at": to_rfc3339(delivery.created_at_us),
        "attempts": [attempt_json(attempt) for attempt in attempts if attempt.delivery_id == delivery.id],
    }


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "attempt": attempt.attempt,
        "outcome": attempt.outcome,
        "status_code": attempt.status_code,
        "latency_ms": attempt.latency_ms,
        "error": attempt.error,
        "response_excerpt": attempt.response_excerpt,
        "at": to_rfc3339(attempt.created_at_us),
    }
