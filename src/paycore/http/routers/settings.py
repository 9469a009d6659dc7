"""The caller's tenant settings: the refund approval threshold (SPEC §7.1)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.tenants import schemas
from paycore.tenants import settings as tenant_settings
from paycore.tenants.settings import TenantSettings

router = APIRouter(
    prefix="/v1/settings", tags=["settings"], dependencies=[Depends(authenticate)], route_class=JsonRoute
)


@router.get("", responses=ERRORS)
def get_settings(request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        found = tenant_settings.get(connection, tenant_id)
    return json_response(200, schemas.settings_json(found))


@router.put("", responses=ERRORS)
def put_settings(body: schemas.SettingsUpdate, request: Request) -> Response:
    """Replace the settings (a PUT: sending it twice is the same as once); a field left out
    (`manual_resolution_after_seconds`) keeps its value. The threshold applies to refunds
    created afterwards; a refund keeps the status it was created with. Every change is in the
    audit log with who made it (`GET /v1/audit_events?type=settings.updated`)."""
    who = caller(request)

    def change(connection: Connection) -> TenantSettings:
        current = tenant_settings.get(connection, who.tenant_id)
        window = body.manual_resolution_after_seconds
        wanted = TenantSettings(
            refund_approval_threshold_minor=body.refund_approval_threshold_minor,
            manual_resolution_after_seconds=current.manual_resolution_after_seconds if window is None else window,
        )
        return tenant_settings.set(connection, who.tenant_id, wanted, actor=who.actor, now_us=now_us())

    stored = request.app.state.database.transaction(change)
    return json_response(200, schemas.settings_json(stored))
