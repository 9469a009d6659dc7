"""A tenant's settings in the console: the refund approval threshold and the manual-resolution
window (`tenants.settings`), with their last changes from the audit log.

Every signed-in person reads them; only an approver (`change_settings`) is offered the form, and
anyone else who posts it anyway is refused (403, nothing changes). An approver may loosen a
control (raise or clear the threshold, shorten the window), which a tenant's API key may not;
`tenants.settings.set` keeps that rule and audits every change with its old and new values.
A tenant operator sees and changes only their own tenant's."""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from paycore.audit import service as audit
from paycore.audit.service import AuditFilter
from paycore.http.console import render, scope, session
from paycore.http.console.scope import BadFilter
from paycore.http.errors import status_of
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError, InvalidRequest, NotFound
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.kit.numbers import InvalidNumber, parse_digits
from paycore.operators import service as operators
from paycore.operators.types import Principal
from paycore.tenants import service as tenants
from paycore.tenants import settings as tenant_settings
from paycore.tenants.settings import MANUAL_RESOLUTION_AFTER_SECONDS_MAX, TenantSettings

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(session.principal)]
TENANTS_LISTED_MAX: Final = 200  # the picker's links; any other tenant is typed in
CHANGES_SHOWN: Final = 10


class NoSuchTenant(NotFound):
    code = "not_found"


@router.get("/settings")
def settings_page(request: Request, who: Who) -> Response:
    """One tenant's settings (`?tenant=`; a tenant operator's own always), or the tenants to pick."""
    try:
        tenant_id = scope.tenant_of(who, request.query_params.get("tenant"))
    except BadFilter as error:
        return render.page(request, "refused.html", 400, heading="Refused", message=str(error), back="/ops/settings")
    with request.app.state.database.read() as connection:
        if tenant_id is None:
            listed = tenants.first_tenant_ids(connection, limit=TENANTS_LISTED_MAX)
            return render.page(request, "settings.html", tenant_id=None, tenants=listed)
        if not _known(connection, who, tenant_id):
            message = f"No tenant {tenant_id} here."
            return render.page(request, "refused.html", 404, heading="No such tenant", message=message, back="/ops")
        found = tenant_settings.get(connection, tenant_id)
        where = AuditFilter(tenant_id=tenant_id, type="settings.updated")
        events = audit.audit_page(connection, where, starting_after=None, limit=CHANGES_SHOWN)
    changes = [(event, _change_text(event.data)) for event in events]
    return render.page(request, "settings.html", tenant_id=tenant_id, settings=found, changes=changes)


@router.post("/settings/{tenant_id}")
async def change_settings(request: Request, who: Who, tenant_id: str) -> Response:
    """An approver replaces the tenant's settings: both fields of the form (an empty threshold:
    none). A loosening is theirs to make; the change is audited with its old and new values."""
    fields = await session.form(request)
    back = f"/ops/settings?{urllib.parse.urlencode({'tenant': tenant_id})}"

    def work(connection: Connection) -> str:
        tenants.check_tenant_id(tenant_id, param="tenant")
        if not _known(connection, who, tenant_id):
            raise NoSuchTenant(f"no tenant {tenant_id} here")
        wanted = _wanted(fields)
        stored = tenant_settings.set(
            connection,
            tenant_id,
            lambda _current: wanted,
            actor=who.actor,
            by_approver=who.may("change_settings"),
            now_us=now_us(),
        )
        threshold = stored.refund_approval_threshold_minor
        return (
            f"Settings of {tenant_id} changed: approval threshold {'none' if threshold is None else threshold}, "
            f"manual window {stored.manual_resolution_after_seconds} s."
        )

    try:
        operators.require(who, "change_settings")
        notice = await run_in_threadpool(request.app.state.database.transaction, work)
    except DomainError as error:
        return render.page(
            request, "refused.html", status_of(error), heading="Refused", message=error.message, back=back
        )
    return RedirectResponse(f"{back}&{urllib.parse.urlencode({'notice': notice})}", status_code=303)


def _known(connection: Connection, who: Principal, tenant_id: str) -> bool:
    """A tenant the person may see that exists (local mode's developer names any: a tenant
    there is only the Paycore-Tenant header's name)."""
    if not who.sees(tenant_id):
        return False
    return who.operator is None or bool(tenants.tenant_ids(connection, [tenant_id]))


def _wanted(fields: dict[str, str]) -> TenantSettings:
    raw = fields.get("refund_approval_threshold_minor", "").strip()
    threshold = None if raw == "" else _whole(raw, "refund_approval_threshold_minor", AMOUNT_MINOR_MAX)
    window = _whole(
        fields.get("manual_resolution_after_seconds", "").strip(),
        "manual_resolution_after_seconds",
        MANUAL_RESOLUTION_AFTER_SECONDS_MAX,
    )
    return TenantSettings(refund_approval_threshold_minor=threshold, manual_resolution_after_seconds=window)


def _whole(raw: str, name: str, maximum: int) -> int:
    try:
        return parse_digits(raw, maximum=maximum)
    except InvalidNumber as error:
        raise InvalidRequest(f"{name} must be a whole number from 0 to {maximum}", param=name) from error


def _change_text(data: dict[str, Any]) -> str:
    """A change as a person reads it: each field that changed, from what to what."""
    before, after = data.get("from", {}), data.get("to", {})
    parts = [
        f"{name}: {_shown(before.get(name))} → {_shown(after.get(name))}"
        for name in after
        if before.get(name) != after.get(name)
    ]
    return "; ".join(parts) or "no change"


def _shown(value: object) -> str:
    return "none" if value is None else str(value)
