"""The caller's tenant settings: the refund approval threshold (SPEC §7.1) and the manual-resolution
window. A tenant's key may tighten them; loosening them is an approver's, in the console."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.schemas import ErrorBody
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


_PUT_RESPONSES = {
    **ERRORS,
    200: {"description": "The settings as stored"},
    403: {"model": ErrorBody, "description": "approver_required: the change loosens a control (nothing changed)"},
}


@router.put("", responses=_PUT_RESPONSES)
def put_settings(body: schemas.SettingsUpdate, request: Request) -> Response:
    """Replace the settings (a PUT: sending it twice is the same as once).
    `refund_approval_threshold_minor` is required (null: no threshold);
    `manual_resolution_after_seconds` left out (or null) keeps its value. An API key may only
    tighten the controls: lower the threshold, set one where there was none, lengthen the
    window. Raising or clearing the threshold, or shortening the window, is 403
    `approver_required` and changes nothing: an approver does it in the console
    (`/ops/settings`). In local mode (no API key, no operator) the one developer is every role
    and may loosen here too. The threshold applies to refunds created afterwards; a refund
    keeps the status it was created with. Every change is in the audit log with who made it
    and the settings before and after (`GET /v1/audit_events?type=settings.updated`)."""
    who = caller(request)

    def wanted(current: TenantSettings) -> TenantSettings:
        window = body.manual_resolution_after_seconds
        return TenantSettings(
            refund_approval_threshold_minor=body.refund_approval_threshold_minor,
            manual_resolution_after_seconds=current.manual_resolution_after_seconds if window is None else window,
        )

    def change(connection: Connection) -> TenantSettings:
        # Local mode's one developer is every role (as in the console); an API key no approver.
        by_approver = not who.authenticated
        return tenant_settings.set(
            connection, who.tenant_id, wanted, actor=who.actor, by_approver=by_approver, now_us=now_us()
        )

    stored = request.app.state.database.transaction(change)
    return json_response(200, schemas.settings_json(stored))
