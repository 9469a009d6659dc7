"""SPEC §7.1: refunds of a succeeded payment. Creating one only stores it (its amount held
against the payment and on the merchant's balance); a worker sends it to the processor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import dumps, json_response, render_refusal
from paycore.http.responses import ERRORS, IDEMPOTENT, OPTIONALLY_IDEMPOTENT
from paycore.http.routers.events import event_json
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.payments import service as payments
from paycore.refunds import create, create_on_loop, schemas, states
from paycore.refunds import service as refunds
from paycore.refunds.create_plan import RefundRequest
from paycore.refunds.types import Refund

router = APIRouter(tags=["refunds"], dependencies=[Depends(authenticate)], route_class=JsonRoute)

_CREATE_RESPONSES = {
    **ERRORS,
    201: {"description": "The refund, in pending (or requires_approval above the tenant's threshold)"},
    409: {"description": "payment_not_refundable (the payment has not succeeded), or an idempotency conflict"},
    422: {"description": "over_refund: the payment's refunds would exceed what was paid (recorded)"},
}
_CHANGE_RESPONSES = {
    **ERRORS,
    200: {"description": "The refund after the change"},
    409: {"description": "refund_state_conflict: the refund is not awaiting approval (body adds `status`)"},
}


@router.post(
    "/v1/payments/{payment_id}/refunds", status_code=201, responses=_CREATE_RESPONSES, openapi_extra=IDEMPOTENT
)
def create_refund(payment_id: str, body: schemas.RefundCreate, request: Request) -> Response:
    """Refund part or all of a succeeded payment; never more than was paid, counting every
    refund that has not failed or been canceled."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.refunds` is matched
    # first and serves a well-formed refund itself; it hands this route every other body, whose
    # refusal this route's validation answers as always. This route also declares the endpoint
    # in the OpenAPI document.
    return refund_answer(request, payment_id, body, body.model_dump(mode="json"))


def refund_answer(request: Request, payment_id: str, body: schemas.RefundCreate, body_json: Any) -> Response:
    """The answer to a refund whose body `schemas.RefundCreate` accepts (`body_json` its
    `model_dump(mode="json")`), the caller authenticated: the one home of what both edges do
    past the body (the key, the write, the answer). Blocking: called on a worker thread."""
    key_scope, refund = refund_request(request, payment_id, body, body_json)
    outcome, replayed = create.create_refund(
        request.app.state.database, key_scope, refund, render=_render, render_refusal=render_refusal
    )
    return idempotent.response(outcome, replayed)


async def refund_answer_on_loop(
    request: Request, payment_id: str, body: schemas.RefundCreate, body_json: Any
) -> Response:
    """`refund_answer` from the event loop (the thin edge's): the same request rules, then
    `refunds.create_on_loop`, whose write needs no worker thread."""
    key_scope, refund = refund_request(request, payment_id, body, body_json)
    outcome, replayed = await create_on_loop.create_refund(
        request.app.state.database, key_scope, refund, render=_render, render_refusal=render_refusal
    )
    return idempotent.response(outcome, replayed)


def refund_request(
    request: Request, payment_id: str, body: schemas.RefundCreate, body_json: Any
) -> tuple[idempotency.KeyScope, RefundRequest]:
    """The key's scope and the refund asked for, the request's rules checked (the key): what
    both answers start from. No I/O."""
    who = caller(request)
    key = idempotent.header_key(request, required=True)
    assert key is not None
    key_scope = idempotent.scope(request, tenant_id=who.tenant_id, key=key, body=body_json, keep_forever=True)
    return key_scope, RefundRequest(payment_id, body.amount_minor, body.reason, who.actor)


def _render(refund: Refund, history: list[audit.Event]) -> str:
    return dumps(schemas.refund_json(refund, history))


@router.get("/v1/payments/{payment_id}/refunds", responses=ERRORS)
def list_refunds(payment_id: str, request: Request, paged: paging.PageQuery) -> Response:
    """The payment's refunds, oldest first."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payments.MACHINE.load(connection, tenant_id, payment_id)
        page = refunds.of_payment(
            connection, tenant_id, payment_id, starting_after=paged.starting_after, limit=paged.fetch
        )
    return paged.json(page, schemas.summary_json)


@router.get("/v1/refunds", responses=ERRORS)
def list_all_refunds(
    request: Request,
    paged: paging.PageQuery,
    status: Annotated[str | None, Query(max_length=32, json_schema_extra={"enum": list(states.STATUSES)})] = None,
) -> Response:
    """The tenant's refunds of every payment, oldest first; `?status=in_doubt` for the ones
    awaiting the processor's word."""
    tenant_id = caller(request).tenant_id
    paging.status_filter(status, states.STATUSES)
    with request.app.state.database.read() as connection:
        page = refunds.page(
            connection, tenant_id, status=status, starting_after=paged.starting_after, limit=paged.fetch
        )
    return paged.json(page, schemas.summary_json)


@router.get("/v1/refunds/{refund_id}", responses=ERRORS)
def get_refund(refund_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payload = _with_history(connection, refunds.MACHINE.load(connection, tenant_id, refund_id))
    return json_response(200, payload)


@router.post("/v1/refunds/{refund_id}/approve", responses=_CHANGE_RESPONSES, openapi_extra=OPTIONALLY_IDEMPOTENT)
def approve_refund(refund_id: str, request: Request) -> Response:
    """requires_approval -> pending: the worker sends it next."""
    return _change(request, refund_id, refunds.approve)


@router.post("/v1/refunds/{refund_id}/cancel", responses=_CHANGE_RESPONSES, openapi_extra=OPTIONALLY_IDEMPOTENT)
def cancel_refund(refund_id: str, request: Request) -> Response:
    """requires_approval -> canceled: its amount is refundable again. Canceling a canceled
    refund answers 200 with it."""
    return _change(request, refund_id, refunds.cancel)


@router.get("/v1/refunds/{refund_id}/events", responses=ERRORS)
def refund_events(refund_id: str, request: Request, limit: paging.Limit = 100) -> Response:
    """The refund's audit log: state changes, processor calls, webhooks."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        refunds.MACHINE.load(connection, tenant_id, refund_id)
        found = audit.events_of(connection, tenant_id, refund_id, limit=limit)
    return paging.list_json([event_json(e) for e in found])


def _change(request: Request, refund_id: str, change: Callable[..., Refund]) -> Response:
    """Approve or cancel in one transaction, recorded under the Idempotency-Key if one is sent."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=False)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        refund = change(connection, tenant_id, refund_id, actor=caller(request).actor, now_us=now_us)
        return 200, _with_history(connection, refund)

    return idempotent.run(request, tenant_id=tenant_id, key=key, body={}, effect=effect, keep_forever=False)


def _with_history(connection: Connection, refund: Refund) -> dict[str, Any]:
    return schemas.refund_json(refund, refunds.history(connection, refund))
