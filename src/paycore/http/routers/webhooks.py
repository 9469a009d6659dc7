"""SPEC §10.1: a tenant's webhook endpoints (docs/webhooks.md). The signing secret
is in the answer that makes it (create, rotate_secret) and nowhere else. That answer is stored
for its replays with the secret sealed (ADR 0018), and opened for the client each time."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS, IDEMPOTENT, OPTIONALLY_IDEMPOTENT
from paycore.http.routing import JsonRoute
from paycore.keyring import Keyring
from paycore.kit.clock import now_us as clock_now_us
from paycore.webhooks import schemas
from paycore.webhooks import service as webhooks

router = APIRouter(
    prefix="/v1/webhook_endpoints", tags=["webhooks"], dependencies=[Depends(authenticate)], route_class=JsonRoute
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "webhook_endpoint_not_found: no such endpoint in this tenant"}
}


@router.post("", status_code=201, responses=ERRORS, openapi_extra=IDEMPOTENT)
def create_endpoint(body: schemas.EndpointCreate, request: Request) -> Response:
    """Register an endpoint: 201 with its signing secret in `secret`, shown in this answer only.
    `https` is required, and loopback, link-local, private and other internal addresses are
    refused: 400 invalid_webhook_url. Local mode adds loopback receivers, over http too."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)
    keyring: Keyring = request.app.state.keyring.get()

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        made = webhooks.create_endpoint(
            connection,
            tenant_id,
            keyring=keyring,
            url=body.url,
            events=body.events,
            description=body.description,
            now_us=now_us,
        )
        return 201, schemas.endpoint_json(made.endpoint, secret=made.endpoint.secret, now_us=now_us)

    return idempotent.run(
        request,
        tenant_id=tenant_id,
        key=key,
        body=body.model_dump(mode="json"),
        effect=effect,
        keep_forever=False,
        shown=partial(webhooks.shown_answer, keyring, tenant_id),
    )


@router.get("", responses=ERRORS)
def list_endpoints(request: Request, paged: paging.PageQuery) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        page = webhooks.list_endpoints(connection, tenant_id, starting_after=paged.starting_after, limit=paged.fetch)
    now = clock_now_us()
    return paged.json(page, lambda endpoint: schemas.endpoint_json(endpoint, now_us=now))


@router.get("/{endpoint_id}", responses={**ERRORS, **_NOT_FOUND})
def get_endpoint(endpoint_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        endpoint = webhooks.get_endpoint(connection, tenant_id, endpoint_id)
    return json_response(200, schemas.endpoint_json(endpoint, now_us=clock_now_us()))


@router.patch("/{endpoint_id}", responses={**ERRORS, **_NOT_FOUND}, openapi_extra=OPTIONALLY_IDEMPOTENT)
def update_endpoint(endpoint_id: str, body: schemas.EndpointUpdate, request: Request) -> Response:
    """Change `url`, `events`, `description`, or `disabled` (true: nothing is sent to it; false:
    enabled again, its failure record cleared and its pending deliveries due at once)."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=False)
    changes = body.model_dump(exclude_unset=True)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        endpoint = webhooks.update_endpoint(
            connection, tenant_id, endpoint_id, changes=changes, actor=caller(request).actor, now_us=now_us
        )
        return 200, schemas.endpoint_json(endpoint, now_us=now_us)

    return idempotent.run(
        request,
        tenant_id=tenant_id,
        key=key,
        body=body.model_dump(mode="json", exclude_unset=True),
        effect=effect,
        keep_forever=False,
    )


@router.delete("/{endpoint_id}", responses={**ERRORS, **_NOT_FOUND})
def delete_endpoint(endpoint_id: str, request: Request) -> Response:
    """The endpoint is deleted (404 from now on) and its pending deliveries canceled."""
    tenant_id = caller(request).tenant_id

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        endpoint = webhooks.delete_endpoint(
            connection, tenant_id, endpoint_id, actor=caller(request).actor, now_us=now_us
        )
        return 200, {**schemas.endpoint_json(endpoint, now_us=now_us), "deleted": True}

    return idempotent.run(request, tenant_id=tenant_id, key=None, body={}, effect=effect, keep_forever=False)


@router.post("/{endpoint_id}/rotate_secret", responses={**ERRORS, **_NOT_FOUND}, openapi_extra=IDEMPOTENT)
def rotate_secret(endpoint_id: str, request: Request) -> Response:
    """A new signing secret, in `secret` (shown in this answer only). The previous secret keeps
    signing beside it until `previous_secret_expires_at` (PAYCORE_WEBHOOK_SECRET_OVERLAP_MS,
    24 hours by default): every delivery in the overlap carries one `v1=` per secret."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)
    overlap_ms = request.app.state.settings.webhook_secret_overlap_ms
    keyring: Keyring = request.app.state.keyring.get()

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        made = webhooks.rotate_secret(
            connection, tenant_id, endpoint_id, keyring=keyring, overlap_ms=overlap_ms, now_us=now_us
        )
        return 200, schemas.endpoint_json(made.endpoint, secret=made.endpoint.secret, now_us=now_us)

    shown = partial(webhooks.shown_answer, keyring, tenant_id)
    return idempotent.run(
        request, tenant_id=tenant_id, key=key, body={}, effect=effect, keep_forever=False, shown=shown
    )
