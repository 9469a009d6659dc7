"""SPEC §11: payouts. Scheduling holds the amount at once; workers send it on its day.

Every schedule request's result, accepted or refused, is an `api_call` event in the audit
log: an accepted one on the payout, a refused one under a request id of its own
(`GET /v1/events?kind=api_call` is not offered; they are read with the payout events or in
the database, docs/payouts.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import dumps, json_response
from paycore.http.responses import ERRORS, IDEMPOTENT
from paycore.http.routers.events import event_json
from paycore.http.routing import JsonRoute
from paycore.idempotency.service import KeyScope
from paycore.payouts import adjustments, cancel, create, create_plan, schemas, states
from paycore.payouts import service as payouts
from paycore.payouts.adjustments import NewAdjustment
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary

router = APIRouter(tags=["payouts"], dependencies=[Depends(authenticate)], route_class=JsonRoute)
SCHEDULE = create_plan.OPERATION

_CREATE_RESPONSES = {
    **ERRORS,
    201: {"description": "The payout, in scheduled; its amount held on the source account"},
    404: {"description": "account_not_found: no such source account"},
    422: {"description": "insufficient_funds or currency_mismatch (recorded under the key)"},
}
_CANCEL_RESPONSES = {
    **ERRORS,
    200: {"description": "The payout, canceled (again: the same body)"},
    409: {"description": "payout_not_cancelable: a worker has claimed it or it has moved on (body adds `status`)"},
}
_ADJUST_RESPONSES = {
    **ERRORS,
    201: {"description": "The adjustment, with its ledger transfer"},
    409: {"description": "adjustment_not_allowed: the payout's state or amounts do not admit it (adds `status`)"},
}


@router.post("/v1/payouts", status_code=201, responses=_CREATE_RESPONSES, openapi_extra=IDEMPOTENT)
def schedule_payout(body: schemas.PayoutCreate, request: Request) -> Response:
    """Schedule a payout to a bank account (ACH in USD, SEPA in EUR) for `execute_on`
    (today, UTC, when absent). The amount is held on the source account at once."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.payouts` is matched
    # first and serves a well-formed payout itself; it hands this route every other body, whose
    # refusal this route's validation answers as always. This route also declares the endpoint
    # in the OpenAPI document.
    return schedule_answer(request, body, body.model_dump(mode="json"))


def schedule_answer(request: Request, body: schemas.PayoutCreate, body_json: Any) -> Response:
    """The answer to a payout whose body `schemas.PayoutCreate` accepts (`body_json` its
    `model_dump(mode="json")`), the caller authenticated: the one home of what both edges do
    past the body (the key, the write, the audit, the answer). Blocking: called on a worker
    thread (the FastAPI route's)."""
    scope, new, actor, reference = _schedule_request(request, body, body_json)
    # The data plane (ADR 0026) writes a payout it can write at once; everything else (a key
    # that exists, a refusal, a schema below its function) is the reference path's.
    answer = create.create(request.app.state.database, scope, new, actor=actor, encode=dumps, reference=reference.run)
    return answer if isinstance(answer, Response) else idempotent.response(answer, False)


async def schedule_answer_on_loop(request: Request, body: schemas.PayoutCreate, body_json: Any) -> Response:
    """`schedule_answer` from the event loop (the thin edge's): the same request, then
    `create.create_on_loop`, whose write needs no worker thread; the reference path where it
    wrote nothing (`idempotent.Reference.on_loop`)."""
    scope, new, actor, reference = _schedule_request(request, body, body_json)
    answer = await create.create_on_loop(request.app.state.database, scope, new, actor=actor, encode=dumps)
    return idempotent.response(answer, False) if answer is not None else await reference.on_loop()


def _schedule_request(
    request: Request, body: schemas.PayoutCreate, body_json: Any
) -> tuple[KeyScope, NewPayout, str, idempotent.Reference]:
    """The key's scope, the payout, the actor and the reference path: what both answers start
    from. No I/O."""
    who = caller(request)
    tenant_id = who.tenant_id
    key = idempotent.header_key(request, required=True)
    assert key is not None
    new = NewPayout(
        amount_minor=body.amount_minor,
        currency=body.currency,
        source_account_id=body.source_account,
        rail=body.rail,
        beneficiary=Beneficiary(**body.beneficiary.model_dump()),
        execute_on=body.execute_on,
        metadata=body.metadata,
        idempotency_key=key,
    )

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        payout = payouts.schedule(connection, tenant_id, new, now_us=now_us, actor=who.actor)
        audit.record_api_call(
            connection,
            tenant_id,
            object_type="payout",
            object_id=payout.id,
            operation=SCHEDULE,
            status=201,
            outcome="accepted",
            actor=who.actor,
            now_us=now_us,
            data={"idempotency_key": key},
        )
        return 201, schemas.payout_json(payout, payouts.history(connection, payout))

    # A refusal is audited by paycore.http.refusals, as for every money-moving request.
    reference = idempotent.Reference(request, tenant_id, key, body_json, effect, keep_forever=True)
    scope = idempotent.scope(request, tenant_id=tenant_id, key=key, body=body_json, keep_forever=True)
    return scope, new, who.actor, reference


@router.get("/v1/payouts", responses=ERRORS)
def list_payouts(
    request: Request,
    paged: paging.PageQuery,
    status: Annotated[
        str | None, Query(max_length=16, json_schema_extra={"enum": [states.public(s) for s in states.STATUSES]})
    ] = None,
) -> Response:
    """The tenant's payouts, oldest first; `?status=in_doubt` for the ones awaiting the bank."""
    tenant_id = caller(request).tenant_id
    public = paging.status_filter(status, [states.public(s) for s in states.STATUSES])
    stored = None if public is None else states.stored(public)
    with request.app.state.database.read() as connection:
        page = payouts.page(
            connection, tenant_id, status=stored, starting_after=paged.starting_after, limit=paged.fetch
        )
    return paged.json(page, schemas.payout_json)


@router.get("/v1/payouts/{payout_id}", responses=ERRORS)
def get_payout(payout_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payout = payouts.MACHINE.load(connection, tenant_id, payout_id)
        payload = schemas.payout_json(payout, payouts.history(connection, payout))
        payload["adjustments"] = [schemas.adjustment_json(a) for a in payouts.adjustments(connection, payout)]
    return json_response(200, payload)


@router.post("/v1/payouts/{payout_id}/cancel", responses=_CANCEL_RESPONSES, openapi_extra=IDEMPOTENT)
def cancel_payout(payout_id: str, request: Request) -> Response:
    """scheduled|queued -> canceled, the hold voided. Races a worker's claim on one
    compare-and-set: exactly one wins; the loser sees why (409 with the current status)."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.payouts` is matched
    # first and serves every cancel itself (it reads no body, as this route does not); this route
    # declares the endpoint in the OpenAPI document.
    return cancel_answer(request, payout_id)


def cancel_answer(request: Request, payout_id: str) -> Response:
    """The answer to a cancel, the caller authenticated: the one home of what both edges do (the
    key, the compare-and-set, the answer). Blocking: called on a worker thread (the FastAPI
    route's)."""
    scope, actor, reference = _cancel_request(request, payout_id)
    # The data plane (ADR 0026) cancels a payout it can cancel at once; everything else (a key
    # that exists, a payout missing, canceled or claimed, a schema below its function) is the
    # reference path's.
    database = request.app.state.database
    answer = cancel.cancel(database, scope, payout_id, actor=actor, encode=dumps, reference=reference.run)
    return answer if isinstance(answer, Response) else idempotent.response(answer, False)


async def cancel_answer_on_loop(request: Request, payout_id: str) -> Response:
    """`cancel_answer` from the event loop (the thin edge's): the same request, then
    `cancel.cancel_on_loop`, whose reads and write need no worker thread; the reference path
    where it wrote nothing (`idempotent.Reference.on_loop`)."""
    scope, actor, reference = _cancel_request(request, payout_id)
    answer = await cancel.cancel_on_loop(request.app.state.database, scope, payout_id, actor=actor, encode=dumps)
    return idempotent.response(answer, False) if answer is not None else await reference.on_loop()


def _cancel_request(request: Request, payout_id: str) -> tuple[KeyScope, str, idempotent.Reference]:
    """The key's scope, the actor and the reference path: what both answers start from. No I/O."""
    tenant_id, actor = caller(request).tenant_id, caller(request).actor
    key = idempotent.header_key(request, required=True)
    assert key is not None

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        payout = payouts.cancel(connection, tenant_id, payout_id, now_us=now_us, actor=actor)
        return 200, schemas.payout_json(payout, payouts.history(connection, payout))

    reference = idempotent.Reference(request, tenant_id, key, {}, effect, keep_forever=False)
    scope = idempotent.scope(request, tenant_id=tenant_id, key=key, body={}, keep_forever=False)
    return scope, actor, reference


@router.get("/v1/payouts/{payout_id}/events", responses=ERRORS)
def payout_events(payout_id: str, request: Request, limit: paging.Limit = 100) -> Response:
    """The payout's audit log, oldest first: the API result that created it, every state
    change, every bank call (attempt number, request, answer or error, latency), webhooks,
    adjustments."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payouts.MACHINE.load(connection, tenant_id, payout_id)
        found = audit.events_of(connection, tenant_id, payout_id, limit=limit)
    return paging.list_json([event_json(e) for e in found])


@router.post(
    "/v1/payouts/{payout_id}/adjustments", status_code=201, responses=_ADJUST_RESPONSES, openapi_extra=IDEMPOTENT
)
def create_adjustment(payout_id: str, body: schemas.AdjustmentCreate, request: Request) -> Response:
    """Record a chargeback of the payout's funding (or its reversal), a recovery from the
    source account's owner, a fee reversal, or a refund from the beneficiary. Fees and
    returns come from the bank."""
    tenant_id, actor = caller(request).tenant_id, caller(request).actor
    key = idempotent.header_key(request, required=True)
    assert key is not None
    new = NewAdjustment(kind=body.kind, amount_minor=body.amount_minor, effective_on=body.effective_on, note=body.note)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        adjustment, _ = adjustments.record_from_api(
            connection, tenant_id, payout_id, new, key=key, actor=actor, now_us=now_us
        )
        return 201, schemas.adjustment_json(adjustment)

    return idempotent.run(
        request, tenant_id=tenant_id, key=key, body=body.model_dump(mode="json"), effect=effect, keep_forever=True
    )


@router.get("/v1/payouts/{payout_id}/adjustments", responses=ERRORS)
def list_adjustments(payout_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payout = payouts.MACHINE.load(connection, tenant_id, payout_id)
        data = [schemas.adjustment_json(a) for a in payouts.adjustments(connection, payout)]
    return paging.list_json(data)
