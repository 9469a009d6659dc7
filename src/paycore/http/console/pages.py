"""The console's read pages: the overview, the lists of payments, refunds and payouts, and one
object's timeline. The queues and reports are in `queues.py` and `reports.py`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from paycore.disputes import service as disputes
from paycore.http.console import activity, render, scope, timeline
from paycore.http.console.scope import KINDS, BadFilter, Kind
from paycore.http.console.session import principal
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.manual_resolutions import service as resolutions
from paycore.monitoring import service as operations
from paycore.operators.types import Principal
from paycore.payments.schemas import payment_object
from paycore.payouts import service as payouts
from paycore.refunds import service as refunds

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(principal)]


@router.get("")
def overview(request: Request, who: Who) -> Response:
    now = now_us()
    with request.app.state.database.read() as connection:
        found = operations.overview(connection, request.app.state.schedules, tenant_id=who.scope, now_us=now)
    return render.page(request, "overview.html", o=found, now=now, chart_rows=activity.rows(found.activity))


def _list(request: Request, who: Principal, kind: Kind) -> Response:
    try:
        search, given = scope.search_of(request, who, kind)
    except BadFilter as error:
        return render.page(
            request,
            "list.html",
            400,
            kind=kind,
            rows=[],
            given=scope.given_filters(request),
            more=None,
            flash=str(error),
            flash_error=True,
            now=now_us(),
        )
    with request.app.state.database.read() as connection:
        rows = kind.machine.search(connection, search)
    more = rows[-1].id if len(rows) > scope.PAGE_ROWS else None
    rows = rows[: scope.PAGE_ROWS]
    if more is not None:
        more = rows[-1].id
    return render.page(request, "list.html", kind=kind, rows=rows, given=given, more=more, now=now_us())


@router.get("/payments")
def payment_list(request: Request, who: Who) -> Response:
    return _list(request, who, KINDS["payments"])


@router.get("/refunds")
def refund_list(request: Request, who: Who) -> Response:
    return _list(request, who, KINDS["refunds"])


@router.get("/payouts")
def payout_list(request: Request, who: Who) -> Response:
    return _list(request, who, KINDS["payouts"])


@router.get("/payments/{payment_id}")
def payment_page(request: Request, who: Who, payment_id: str) -> Response:
    return payment_view(request, who, payment_id)


def payment_view(request: Request, who: Principal, payment_id: str, status: int = 200, **extra: Any) -> Response:
    """The payment's page; `extra` for a refused form shown again (`typed`, `typed_capture`,
    `flash`)."""
    with request.app.state.database.read() as connection:
        payment = scope.find(connection, who, KINDS["payments"], payment_id)
        if payment is None:
            return _missing(request, "payment", payment_id)
        story = timeline.story(connection, payment.tenant_id, payment.id, [payment.transfer_id])
        found_refunds = refunds.of_payment(connection, payment.tenant_id, payment.id, starting_after=None, limit=100)
        found_disputes = disputes.list_disputes(
            connection, payment.tenant_id, status=None, payment_id=payment.id, starting_after=None, limit=20
        )
        context = _waiting(connection, "payment", payment, now_us())
    return render.page(
        request,
        "object.html",
        status,
        kind=KINDS["payments"],
        item=payment,
        shown=payment_object(payment),  # the API's figures: capturable, captured, refundable
        story=story,
        refunds=found_refunds,
        disputes=found_disputes,
        **context,
        **extra,
    )


@router.get("/refunds/{refund_id}")
def refund_page(request: Request, who: Who, refund_id: str) -> Response:
    with request.app.state.database.read() as connection:
        refund = scope.find(connection, who, KINDS["refunds"], refund_id)
        if refund is None:
            return _missing(request, "refund", refund_id)
        story = timeline.story(
            connection, refund.tenant_id, refund.id, [refund.transfer_id] if refund.transfer_id else []
        )
        requester = refunds.requested_by(connection, refund)
        context = _waiting(connection, "refund", refund, now_us())
    return render.page(
        request,
        "object.html",
        kind=KINDS["refunds"],
        item=refund,
        story=story,
        refunds=[],
        requester=requester,
        **context,
    )


@router.get("/payouts/{payout_id}")
def payout_page(request: Request, who: Who, payout_id: str) -> Response:
    with request.app.state.database.read() as connection:
        payout = scope.find(connection, who, KINDS["payouts"], payout_id)
        if payout is None:
            return _missing(request, "payout", payout_id)
        adjusted = payouts.adjustments(connection, payout)
        transfers = [payout.transfer_id, *(adjustment.transfer_id for adjustment in adjusted if adjustment.transfer_id)]
        story = timeline.story(connection, payout.tenant_id, payout.id, transfers)
        context = _waiting(connection, "payout", payout, now_us())
    return render.page(
        request,
        "object.html",
        kind=KINDS["payouts"],
        item=payout,
        story=story,
        refunds=[],
        adjustments=adjusted,
        **context,
    )


def _waiting(connection: Any, kind: str, item: Any, now: int) -> dict[str, Any]:
    """What the page offers about an item waiting on the processor: ask again, resolve by hand."""
    checked = resolutions.kind_of(kind)
    eligibility = resolutions.eligibility(connection, item.tenant_id, checked, item, now_us=now)
    return {"eligibility": eligibility, "now": now, "waiting": eligibility.status in resolutions.waiting(checked)}


def _missing(request: Request, kind: str, object_id: str) -> Response:
    return render.page(
        request, "refused.html", 404, heading=f"No such {kind}", message=f"No {kind} {object_id} here.", back="/ops"
    )
