"""The console's reports (the loss report is `losses.py`): the ledger's accounts and
an account's statement, webhook endpoints and failing
deliveries, and the audit log. Read-only pages; the one action they offer (redeliver) is in
`actions.py`.

Every list has filters, cursor pages and links to every object it names. A list that spans
tenants (the platform's staff) pages on (tenant, id): its cursor is `starting_after` with
`starting_after_tenant` (the Next page link carries both). Money is an integer everywhere
here: the charts' geometry is integer arithmetic (pixels = amount * height // scale), the CSV
carries minor units and the decimal text of `kit.money.format_minor`; nothing is a float.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from paycore.audit import service as audit
from paycore.audit.service import AuditFilter, Event
from paycore.http.console import forms, render, scope
from paycore.http.console.scope import BadFilter
from paycore.http.console.session import principal
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError
from paycore.ledger import service as ledger
from paycore.ledger import statement
from paycore.operators.types import Principal
from paycore.webhooks import service as webhooks
from paycore.webhooks.types import Endpoint

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(principal)]
DELIVERY_STATUSES: Final = {"failed": ("failed",), "retrying": ("pending",), "": webhooks.FAILING_STATUSES}
HOLD_STEPS: Final = {"pending": "hold", "post": "hold posted", "void": "hold voided", "expire": "hold expired"}
LINKED: Final = {"payment": "/ops/payments/", "refund": "/ops/refunds/", "payout": "/ops/payouts/"}


@router.get("/ledger")
def ledger_page(request: Request, who: Who) -> Response:
    """Accounts with their balances (posted, pending, available) of the visible tenant(s):
    filter by tenant and code (starting with), cursor pages in (tenant, id) order."""
    given = forms.given(request, ("tenant", "code"))
    context: dict[str, Any] = {"rows": [], "more": None, "given": given}
    try:
        tenant_id = scope.tenant_of(who, given["tenant"])
        code = forms.text(given, "code", 128)
        after = forms.cursor(request, who, tenant_id)
        with request.app.state.database.read() as connection:
            rows = ledger.list_accounts(
                connection, tenant_id, code_prefix=code, starting_after=after, limit=scope.PAGE_ROWS + 1
            )
    except (BadFilter, DomainError) as error:
        return forms.refused(request, "ledger.html", error, **context)
    more = rows[scope.PAGE_ROWS - 1] if len(rows) > scope.PAGE_ROWS else None
    return render.page(request, "ledger.html", **(context | {"rows": rows[: scope.PAGE_ROWS], "more": more}))


@router.get("/ledger/accounts/{account_id}")
def account_page(request: Request, who: Who, account_id: str) -> Response:
    """An account, its balances and its statement (entries in commit order, cursor pages),
    each entry beside what its transfer moved money for."""
    try:
        tenant_id = scope.tenant_of(who, request.query_params.get("tenant"))
        after = forms.text(forms.given(request, ("starting_after",)), "starting_after")
        with request.app.state.database.read() as connection:
            found = ledger.find_listed_account(connection, account_id, tenant_id=tenant_id)
            if found is None:
                message = f"No account {account_id} here."
                return render.page(
                    request, "refused.html", 404, heading="No such account", message=message, back="/ops/ledger"
                )
            entries, has_more = ledger.list_entries(
                connection, found.tenant_id, account_id, limit=scope.PAGE_ROWS, starting_after=after
            )
            references = ledger.transfer_references(connection, found.tenant_id, [e.transfer_id for e in entries])
            kinds = {transfer_id: reference[0] for transfer_id, reference in references.items()}
            lines = statement.lines(
                connection, found.tenant_id, account_id, found.account.normal_balance, entries, kinds
            )
    except (BadFilter, DomainError) as error:
        message = forms.message(error)
        return render.page(request, "refused.html", 400, heading="Refused", message=message, back="/ops/ledger")
    more = entries[-1].id if has_more and entries else None
    return render.page(
        request,
        "account.html",
        found=found,
        lines=lines,
        references=references,
        more=more,
        linked=LINKED,
        balance_entries_read_max=statement.BALANCE_ENTRIES_READ_MAX,
        kinds=HOLD_STEPS,
    )


# ---------------------------------------------------------------------------- webhooks


@router.get("/webhooks")
def webhooks_page(request: Request, who: Who) -> Response:
    """Endpoints of the visible tenant(s), never their secrets; deliveries failed or being
    retried, the latest first, each with its last error and a Redeliver form."""
    given = forms.given(request, ("tenant", "endpoint", "status"))
    context: dict[str, Any] = {"endpoints": [], "deliveries": [], "events": {}, "more": None, "more_endpoints": None}
    context |= {"given": given, "statuses": tuple(name for name in DELIVERY_STATUSES if name), "now": now_us()}
    try:
        tenant_id = scope.tenant_of(who, given["tenant"])
        endpoint_id = forms.text(given, "endpoint")
        if given["status"] not in DELIVERY_STATUSES:
            raise BadFilter("status must be failed or retrying")
        endpoints_after = forms.cursor(request, who, tenant_id, "endpoints_after")
        after = forms.cursor(request, who, tenant_id)
        with request.app.state.database.read() as connection:
            endpoints = webhooks.endpoints_of_any(
                connection, tenant_id, starting_after=endpoints_after, limit=scope.PAGE_ROWS + 1
            )
            deliveries = webhooks.failing_deliveries(
                connection,
                tenant_id,
                endpoint_id=endpoint_id,
                statuses=DELIVERY_STATUSES[given["status"]],
                starting_after=after,
                limit=scope.PAGE_ROWS + 1,
            )
            events = _events_of(connection, [(d.tenant_id, d.event_id) for d in deliveries[: scope.PAGE_ROWS]])
    except (BadFilter, DomainError) as error:
        return forms.refused(request, "webhooks.html", error, **context)
    context |= {
        "endpoints": [_endpoint_view(endpoint) for endpoint in endpoints[: scope.PAGE_ROWS]],
        "more_endpoints": endpoints[scope.PAGE_ROWS - 1] if len(endpoints) > scope.PAGE_ROWS else None,
        "deliveries": deliveries[: scope.PAGE_ROWS],
        "more": deliveries[scope.PAGE_ROWS - 1] if len(deliveries) > scope.PAGE_ROWS else None,
        "events": events,
        "linked": LINKED,
    }
    return render.page(request, "webhooks.html", **context)


def _endpoint_view(endpoint: Endpoint) -> dict[str, Any]:
    """What the page shows of an endpoint: everything but its secrets, which never leave."""
    hidden = ("secret", "previous_secret")
    return {name: getattr(endpoint, name) for name in endpoint.__dataclass_fields__ if name not in hidden}


def _events_of(connection: Any, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Event]:
    by_tenant: dict[str, list[str]] = {}
    for tenant_id, event_id in keys:
        by_tenant.setdefault(tenant_id, []).append(event_id)
    found: dict[tuple[str, str], Event] = {}
    for tenant_id, event_ids in by_tenant.items():
        for event_id, event in audit.get_many(connection, tenant_id, event_ids).items():
            found[(tenant_id, event_id)] = event
    return found


# ---------------------------------------------------------------------------- audit

AUDIT_FILTERS: Final = ("actor", "type", "object_id", "outcome", "from", "to", "tenant")


@router.get("/audit")
def audit_page(request: Request, who: Who) -> Response:
    """The audit log, newest first: filter by actor, type, object, outcome, days and (the
    platform's staff) tenant; `*` rows (sign-ins, platform events) are every tenant's."""
    given = forms.given(request, AUDIT_FILTERS)
    context: dict[str, Any] = {"rows": [], "more": None, "given": given, "linked": LINKED}
    try:
        created_gte, created_lt = scope.day_bounds(given["from"], given["to"])
        where = AuditFilter(
            tenant_id=scope.tenant_of(who, given["tenant"]),
            type=forms.text(given, "type"),
            object_id=forms.text(given, "object_id"),
            actor=forms.text(given, "actor"),
            outcome=forms.text(given, "outcome"),
            created_gte_us=created_gte,
            created_lt_us=created_lt,
        )
        after = forms.text(forms.given(request, ("starting_after",)), "starting_after")
        with request.app.state.database.read() as connection:
            rows = audit.audit_page(connection, where, starting_after=after, limit=scope.PAGE_ROWS + 1)
    except (BadFilter, DomainError) as error:
        return forms.refused(request, "audit.html", error, **context)
    more = rows[scope.PAGE_ROWS - 1].id if len(rows) > scope.PAGE_ROWS else None
    shown = [{"event": event, "data": _data_text(event.data)} for event in rows[: scope.PAGE_ROWS]]
    return render.page(request, "audit.html", **(context | {"rows": shown, "more": more}))


def _data_text(data: dict[str, Any], chars_max: int = 4_000) -> str:
    """An event's data for its folded details: indented JSON, cut past `chars_max`."""
    text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False)
    return text if len(text) <= chars_max else text[:chars_max] + "…"
