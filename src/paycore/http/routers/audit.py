"""The audit log, readable: `GET /v1/audit_events`, the tenant's every record (state
changes, calls to the processor, webhooks, API results including refused requests, people's
actions and sign-ins), newest first. `GET /v1/events` stays the list of published events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from paycore.audit import service as audit
from paycore.audit.service import AuditFilter, Event
from paycore.http import paging
from paycore.http.context import authenticate, caller
from paycore.http.responses import ERRORS
from paycore.http.routers.events import event_json
from paycore.http.routing import JsonRoute
from paycore.kit.clock import parse_rfc3339
from paycore.kit.errors import InvalidRequest

router = APIRouter(
    prefix="/v1/audit_events", tags=["audit"], dependencies=[Depends(authenticate)], route_class=JsonRoute
)
_OUTCOME_KINDS = frozenset({"api_call", "processor_call", "webhook"})
Time = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=40,
        description="RFC 3339 with an offset, e.g. 2026-12-04T00:00:00Z; anything else is 400 invalid_request",
    ),
]


def audit_event_json(event: Event) -> dict[str, Any]:
    """An audit record: `outcome` is the result of an API call (accepted, refused; a sign-in's
    succeeded or failed), a processor call (answered, unreachable, refused) or a webhook in
    (applied, stale, ...); null for a state change or a note."""
    return {
        **event_json(event),
        "object": "audit_event",
        "outcome": event.cause if event.kind in _OUTCOME_KINDS else None,
    }


def time_param(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_rfc3339(value)
    except (ValueError, OverflowError) as error:
        raise InvalidRequest(
            f"{name} must be an RFC 3339 time with an offset (e.g. 2026-12-04T00:00:00Z)", param=name
        ) from error


@router.get("", responses=ERRORS)
def list_audit_events(
    request: Request,
    paged: paging.PageQuery,
    event_type: Annotated[str | None, Query(alias="type", min_length=1, max_length=64)] = None,
    object_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    actor: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    outcome: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    idempotency_key: Annotated[str | None, Query(min_length=1, max_length=255)] = None,
    created_gte: Time = None,
    created_lt: Time = None,
) -> Response:
    """The tenant's audit log, newest first, filtered by `type` (`payment.succeeded`,
    `api.payouts.schedule`, `operator.login`, ...), `object_id`, `actor` (`operator:alice`,
    `api_key:key_...`, `worker:resolve_payments`, `processor`, `reconcile:rcn_...`, `local`),
    `outcome` (`refused` finds refused requests), `idempotency_key` and creation time."""
    where = AuditFilter(
        tenant_id=caller(request).tenant_id,
        type=event_type,
        object_id=object_id,
        actor=actor,
        outcome=outcome,
        created_gte_us=time_param(created_gte, "created_gte"),
        created_lt_us=time_param(created_lt, "created_lt"),
        idempotency_key=idempotency_key,
    )
    with request.app.state.database.read() as connection:
        page = audit.audit_page(connection, where, starting_after=paged.starting_after, limit=paged.fetch)
    return paged.json(page, audit_event_json)
