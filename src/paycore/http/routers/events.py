"""SPEC §10.1: the tenant's events (state changes of its money objects), oldest first."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS, StartingAfter
from paycore.kit.clock import to_rfc3339

router = APIRouter(prefix="/v1/events", tags=["events"], dependencies=[Depends(authenticate)])


def event_json(event: Event) -> dict[str, Any]:
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
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    starting_after: StartingAfter = None,
) -> Response:
    tenant_id = caller(request).tenant_id
    limit = min(limit, request.app.state.settings.page_limit_max)
    with request.app.state.database.read() as connection:
        page = audit.list_events(
            connection, tenant_id, kind="state_change", starting_after=starting_after, limit=limit + 1
        )
    data = [event_json(event) for event in page[:limit]]
    return json_response(200, {"object": "list", "data": data, "has_more": len(page) > limit})
