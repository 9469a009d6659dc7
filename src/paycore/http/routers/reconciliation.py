"""SPEC §10: reconciliation runs and breaks, and resolving a break.

A run is global (one settlement report covers every merchant); a tenant sees it with its own
break counts only, never the run's volumes. Breaks are the tenant's. Resolving one is a
person's decision, keyed like every other POST that changes something (ADR 0004)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS, IDEMPOTENT
from paycore.http.routing import JsonRoute
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import schemas, states
from paycore.reconciliation import service as reconciliation

router = APIRouter(
    prefix="/v1/reconciliation", tags=["reconciliation"], dependencies=[Depends(authenticate)], route_class=JsonRoute
)

_RESOLVE_RESPONSES = {
    **ERRORS,
    200: {"description": "The break, resolved"},
    404: {"description": "break_not_found: no such break in this tenant"},
    409: {
        "description": "break_not_open: already resolved or superseded (body adds `status`); or an idempotency conflict"
    },
}


@router.get("/runs", responses=ERRORS)
def list_runs(request: Request, paged: paging.PageQuery) -> Response:
    """Reconciliation runs, oldest first, each with this tenant's breaks it stored by type."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        page = reconciliation_queries.list_runs(
            connection, tenant_id, starting_after=paged.starting_after, limit=paged.fetch
        )
    return paged.json(page, schemas.run_json)


@router.get("/runs/{run_id}", responses=ERRORS)
def get_run(run_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        run = reconciliation_queries.get_run(connection, tenant_id, run_id)
    return json_response(200, schemas.run_json(run))


@router.get("/breaks", responses=ERRORS)
def list_breaks(
    request: Request,
    paged: paging.PageQuery,
    status: Annotated[str | None, Query(max_length=16, json_schema_extra={"enum": list(states.STATUSES)})] = None,
    break_type: Annotated[
        str | None,
        Query(alias="type", max_length=32, json_schema_extra={"enum": list(reconciliation_queries.BREAK_TYPES)}),
    ] = None,
) -> Response:
    """The tenant's breaks, oldest first; `?status=open` is the work left for a person."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        page = reconciliation_queries.list_breaks(
            connection,
            tenant_id,
            status=status,
            break_type=break_type,
            starting_after=paged.starting_after,
            limit=paged.fetch,
        )
    return paged.json(page, schemas.break_json)


@router.get("/breaks/{break_id}", responses=ERRORS)
def get_break(break_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        found = reconciliation_queries.get_break(connection, tenant_id, break_id)
    return json_response(200, schemas.break_json(found))


@router.post("/breaks/{break_id}/resolve", responses=_RESOLVE_RESPONSES, openapi_extra=IDEMPOTENT)
def resolve_break(break_id: str, body: schemas.BreakResolve, request: Request) -> Response:
    """open -> resolved with a resolution (`accepted`, `adjusted`, `processor_corrected`,
    `written_off`) and an optional note; who and when are recorded, and one audit event."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        resolved = reconciliation.resolve_break(
            connection,
            tenant_id,
            break_id,
            resolution=body.resolution,
            note=body.note,
            actor=caller(request).actor,
            now_us=now_us,
        )
        return 200, schemas.break_json(resolved)

    return idempotent.run(
        request, tenant_id=tenant_id, key=key, body=body.model_dump(mode="json"), effect=effect, keep_forever=False
    )
