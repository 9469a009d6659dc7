"""The caller's tenant settings: the refund approval threshold (SPEC §7.1)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.kit.clock import now_us
from paycore.tenants import schemas
from paycore.tenants import settings as tenant_settings
from paycore.tenants.settings import TenantSettings

router = APIRouter(prefix="/v1/settings", tags=["settings"], dependencies=[Depends(authenticate)])


@router.get("", responses=ERRORS)
def get_settings(request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        found = tenant_settings.get(connection, tenant_id)
    return json_response(200, schemas.settings_json(found))


@router.put("", responses=ERRORS)
def put_settings(body: schemas.SettingsUpdate, request: Request) -> Response:
    """Replace the settings (a PUT: sending it twice is the same as once). The threshold
    applies to refunds created afterwards; a refund keeps the status it was created with."""
    tenant_id = caller(request).tenant_id
    wanted = TenantSettings(refund_approval_threshold_minor=body.refund_approval_threshold_minor)
    stored = request.app.state.database.transaction(
        lambda connection: tenant_settings.set(connection, tenant_id, wanted, now_us=now_us())
    )
    return json_response(200, schemas.settings_json(stored))
