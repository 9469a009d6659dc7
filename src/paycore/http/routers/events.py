"""SPEC §10.1: the tenant's events, oldest first, as webhooks deliver them; each event's
deliveries and attempts; a redelivery (docs/webhooks.md). `event_json` is the audit log's
rendering, shared by every object's `/events` list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS, IDEMPOTENT
from paycore.http.routing import JsonRoute
from paycore.kit.clock import to_rfc3339
from paycore.kit.errors import InvalidRequest
from paycore.webhooks import schemas
from paycore.webhooks import service as webhooks
from paycore.webhooks.events import EVENT_TYPES

router = APIRouter(prefix="/v1/events", tags=["events"], dependencies=[Depends(authenticate)], route_class=JsonRoute)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "event_not_found: no such event in this tenant"},
}
_OBJECT_TYPES = ["payment", "refund", "payout", "reconciliation_break", "dispute"]


def event_json(event: Event) -> dict[str, Any]:
    """An audit log row (every kind: state changes, processor calls, webhooks in, API results)."""
    return {
        "id": event.id,
        "object": "event",
        "kind": event.kind,
        "type": event.type,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "from": event.from_state,
        "to": event.to_state,
        "cause": event.cause,
        "actor": event.actor,
        "data": event.data,
        "created_at": to_rfc3339(event.created_at_us),
    }


@router.get("", responses=ERRORS)
def list_events(
    request: Request,
    paged: paging.PageQuery,
    event_type: Annotated[
        str | None, Query(alias="type", max_length=64, json_schema_extra={"enum": list(EVENT_TYPES)})
    ] = None,
    object_type: Annotated[str | None, Query(max_length=32, json_schema_extra={"enum": _OBJECT_TYPES})] = None,
    object_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    """The tenant's published events, oldest first, filtered by `type` and by the object they
    are filed under (`object_type`, `object_id`). `data` is the object after the change."""
    tenant_id = caller(request).tenant_id
    if event_type is not None and event_type not in EVENT_TYPES:
        raise InvalidRequest('type must be an event type (docs/webhooks.md, "Event types")', param="type")
    if object_type is not None and object_type not in _OBJECT_TYPES:
        raise InvalidRequest(f"object_type must be one of {', '.join(_OBJECT_TYPES)}", param="object_type")
    with request.app.state.database.read() as connection:
        page = audit.list_published(
            connection,
            tenant_id,
            type=event_type,
            object_type=object_type,
            object_id=object_id,
            starting_after=paged.starting_after,
            limit=paged.fetch,
        )
    return paged.json(page, schemas.published_json)


@router.get("/{event_id}", responses={**ERRORS, **_NOT_FOUND})
def get_event(event_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        event = webhooks.get_event(connection, tenant_id, event_id)
    return json_response(200, schemas.published_json(event))


@router.get("/{event_id}/deliveries", responses={**ERRORS, **_NOT_FOUND})
def event_deliveries(event_id: str, request: Request) -> Response:
    """The event's deliveries, one per endpoint (more after a redelivery), each with every
    attempt: status code, latency, error, a bounded excerpt of the answer."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        deliveries, attempts = webhooks.deliveries_of(connection, tenant_id, event_id)
    data = [schemas.delivery_json(delivery, attempts) for delivery in deliveries]
    return paging.list_json(data)


@router.post("/{event_id}/redeliver", responses={**ERRORS, **_NOT_FOUND}, openapi_extra=IDEMPOTENT)
def redeliver(event_id: str, request: Request) -> Response:
    """Send the event again, now, to every enabled endpoint that takes its type: a new delivery
    (and delivery id) each, listed in the answer."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        deliveries = webhooks.redeliver(connection, tenant_id, event_id, actor=caller(request).actor, now_us=now_us)
        data = [schemas.delivery_json(delivery, []) for delivery in deliveries]
        return 200, paging.list_body(data)

    return idempotent.run(request, tenant_id=tenant_id, key=key, body={}, effect=effect, keep_forever=False)
