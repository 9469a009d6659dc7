"""SPEC §11: the payout loss report, `GET /v1/reports/losses` (docs/losses.md). Read-only,
the caller's tenant only: one statement gives the page and the totals of every page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from paycore.http import paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response
from paycore.http.responses import ERRORS, StartingAfter
from paycore.http.routing import JsonRoute
from paycore.reports import losses, schemas
from paycore.reports.losses import RAILS, Cursor
from paycore.schemas import CURRENCIES_DOCUMENTED, DAY_DOCUMENTED, QUERY_DIGITS

router = APIRouter(tags=["reports"], dependencies=[Depends(authenticate)], route_class=JsonRoute)

_RESPONSES = {
    **ERRORS,
    200: {"description": "Payouts by loss over the range, highest first, with totals per currency"},
    400: {"description": "invalid_date, invalid_date_range, invalid_starting_after, unsupported_currency, ..."},
}


_DAY = "YYYY-MM-DD (UTC), inclusive"


@router.get("/v1/reports/losses", responses=_RESPONSES)
def loss_report(
    request: Request,
    from_day: Annotated[str | None, Query(alias="from", description=_DAY, json_schema_extra=DAY_DOCUMENTED)] = None,
    to_day: Annotated[str | None, Query(alias="to", description=_DAY, json_schema_extra=DAY_DOCUMENTED)] = None,
    rail: Annotated[str | None, Query(description="ach or sepa", json_schema_extra={"enum": list(RAILS)})] = None,
    currency: Annotated[
        str | None, Query(description="ISO 4217, e.g. USD", json_schema_extra=CURRENCIES_DOCUMENTED)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=losses.PAGE_ROWS_MAX), QUERY_DIGITS] = 20,
    starting_after: StartingAfter = None,
) -> Response:
    """The tenant's payouts by loss (fees, return fees, chargebacks and return shortfalls,
    less fee reversals, chargeback reversals, recoveries and refunds) over the adjustments
    effective from `from` to `to`, highest first; `totals` cover every page."""
    tenant_id = caller(request).tenant_id
    filters = losses.parse_filters(tenant_id, from_day=from_day, to_day=to_day, rail=rail, currency=currency)
    after_id = losses.check_starting_after(starting_after)
    after = None if after_id is None else Cursor(tenant_id, after_id)
    limit = paging.limit_of(request, limit)
    with request.app.state.database.read() as connection:
        losses.begin_report(connection)
        found = losses.report(connection, filters, after=after, limit=limit)
    return json_response(200, schemas.report_json(found, filters))
