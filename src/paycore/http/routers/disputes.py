"""SPEC §6.2: the disputes the processor opened on the tenant's payments, as paycore recorded them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from paycore.disputes import service as disputes
from paycore.disputes import states
from paycore.http import paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute

router = APIRouter(tags=["disputes"], dependencies=[Depends(authenticate)], route_class=JsonRoute)


@router.get("/v1/disputes", responses=ERRORS)
def list_disputes(
    request: Request,
    paged: paging.PageQuery,
    status: Annotated[str | None, Query(max_length=32, json_schema_extra={"enum": list(states.STATUSES)})] = None,
    payment_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    """The tenant's disputes, newest first; `?status=needs_response` for the ones awaiting an
    answer, `?payment_id=` for one payment's."""
    tenant_id = caller(request).tenant_id
    paging.status_filter(status, states.STATUSES)
    with request.app.state.database.read() as connection:
        page = disputes.list_disputes(
            connection,
            tenant_id,
            status=status,
            payment_id=payment_id,
            starting_after=paged.starting_after,
            limit=paged.fetch,
        )
    return paged.json(page, _same)


@router.get("/v1/disputes/{dispute_id}", responses=ERRORS)
def get_dispute(dispute_id: str, request: Request) -> Response:
    """The dispute with its history of state changes (SPEC §6.2)."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payload = disputes.get_dispute_json(connection, tenant_id, dispute_id)
    return json_response(200, payload)


def _same(item: dict[str, Any]) -> dict[str, Any]:
    return item
