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
from paycore.kit.money import CURRENCY_EXPONENTS, InvalidAmountError, parse_major
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
# The threshold is one number of minor units for refunds in every currency; a person types it in
# major units of the currency they pick (its exponent), USD unless they pick another.
THRESHOLD_CURRENCY_DEFAULT: Final = "USD"


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
        return _settings_view(request, connection, who, tenant_id)


def _settings_view(
    request: Request, connection: Connection, who: Principal, tenant_id: str, status: int = 200, **extra: Any
) -> Response:
    """The tenant's settings page; `extra` for a refused form shown again (`typed`, `flash`)."""
    if not _known(connection, who, tenant_id):
        message = f"No tenant {tenant_id} here."
        return render.page(request, "refused.html", 404, heading="No such tenant", message=message, back="/ops")
    found = tenant_settings.get(connection, tenant_id)
    where = AuditFilter(tenant_id=tenant_id, type="settings.updated")
    events = audit.audit_page(connection, where, starting_after=None, limit=CHANGES_SHOWN)
    changes = [(event, _change_text(event.data)) for event in events]
    threshold = found.refund_approval_threshold_minor
    shown_currency = THRESHOLD_CURRENCY_DEFAULT
    typed = {
        "refund_approval_threshold": "" if threshold is None else render.major(threshold, shown_currency),
        "threshold_currency": shown_currency,
        "manual_resolution_after_seconds": str(found.manual_resolution_after_seconds),
    } | extra.pop("typed", {})
    context = {"tenant_id": tenant_id, "settings": found, "changes": changes, "typed": typed} | extra
    return render.page(request, "settings.html", status, **context)


@router.post("/settings/{tenant_id}")
async def change_settings(request: Request, who: Who, tenant_id: str) -> Response:
    """An approver replaces the tenant's settings: both fields of the form (an empty threshold:
    none). A loosening is theirs to make; the change is audited with its old and new values."""
    fields = await session.form(request)
    back = f"/ops/settings?{urllib.parse.urlencode({'tenant': tenant_id})}"
    try:
        operators.require(who, "change_settings")
        tenants.check_tenant_id(tenant_id, param="tenant")
        wanted = _wanted(fields)
    except InvalidRequest as error:
        if error.param not in _FIELDS:
            return render.page(request, "refused.html", 400, heading="Refused", message=error.message, back=back)
        return await run_in_threadpool(_form_again, request, who, tenant_id, fields, error.message)
    except DomainError as error:
        return render.page(
            request, "refused.html", status_of(error), heading="Refused", message=error.message, back=back
        )

    def work(connection: Connection) -> str:
        if not _known(connection, who, tenant_id):
            raise NoSuchTenant(f"no tenant {tenant_id} here")
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
            f"Settings of {tenant_id} changed: approval threshold {_threshold_text(threshold)}, "
            f"manual window {stored.manual_resolution_after_seconds} s."
        )

    try:
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


_FIELDS: Final = ("refund_approval_threshold", "threshold_currency", "manual_resolution_after_seconds")


def _form_again(request: Request, who: Principal, tenant_id: str, fields: dict[str, str], message: str) -> Response:
    """The settings page again, 400, the form holding what was typed and the reason above it."""
    typed = {name: fields.get(name, "") for name in _FIELDS}
    with request.app.state.database.read() as connection:
        return _settings_view(request, connection, who, tenant_id, 400, typed=typed, flash=message, flash_error=True)


def _threshold_text(threshold_minor: int | None) -> str:
    if threshold_minor is None:
        return "none"
    return f"{threshold_minor} minor units ({render.money(threshold_minor, THRESHOLD_CURRENCY_DEFAULT)})"


def _wanted(fields: dict[str, str]) -> TenantSettings:
    raw = fields.get("refund_approval_threshold", "").strip()
    currency = fields.get("threshold_currency", "").strip() or THRESHOLD_CURRENCY_DEFAULT
    if currency not in CURRENCY_EXPONENTS:
        raise InvalidRequest(
            f"threshold_currency must be one of {', '.join(sorted(CURRENCY_EXPONENTS))}", param="threshold_currency"
        )
    threshold = None if raw == "" else _major(raw, currency)
    window = _whole(
        fields.get("manual_resolution_after_seconds", "").strip(),
        "manual_resolution_after_seconds",
        MANUAL_RESOLUTION_AFTER_SECONDS_MAX,
    )
    return TenantSettings(refund_approval_threshold_minor=threshold, manual_resolution_after_seconds=window)


def _major(raw: str, currency: str) -> int:
    """The threshold typed in major units of `currency`, in minor units (`kit.money.parse_major`)."""
    try:
        return parse_major(raw, currency)
    except InvalidAmountError as error:
        raise InvalidRequest(f"refund approval threshold: {error}", param="refund_approval_threshold") from error


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
