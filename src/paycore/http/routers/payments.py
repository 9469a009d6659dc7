"""SPEC §6: payments through the processor."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response, render_refusal
from paycore.http.responses import ERRORS, IDEMPOTENT
from paycore.http.routers.events import event_json
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.kit.errors import InvalidAmount, UnsupportedCurrency
from paycore.kit.money import is_known_currency
from paycore.ledger.schemas import check_metadata
from paycore.payments import create_on_loop, operations, operations_on_loop, schemas
from paycore.payments import service as payments
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import Processor

router = APIRouter(
    prefix="/v1/payments", tags=["payments"], dependencies=[Depends(authenticate)], route_class=JsonRoute
)

_CREATE_RESPONSES = {
    **ERRORS,
    201: {"description": "The processor took the payment (succeeded) or authorized it (requires_capture)"},
    202: {"description": "No answer yet: status in_doubt (timeout or lost response) or processing"},
    402: {"description": "Declined: the payment in status failed, with failure_code, plus error and message"},
}


@router.post("", status_code=201, responses=_CREATE_RESPONSES, openapi_extra=IDEMPOTENT)
def create_payment(body: schemas.PaymentCreate, request: Request) -> Response:
    """Take a payment. A timeout is never guessed: 202 `in_doubt`, resolved later by evidence."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.payments` is matched
    # first and serves a well-formed payment itself; it hands this route every other body, whose
    # refusal this route's validation answers as always. This route also declares the endpoint
    # in the OpenAPI document.
    body_json = body.model_dump(mode="json")
    if body_json["capture"] == "automatic":
        # The default leaves the fingerprint as it was before `capture` existed: a key used
        # then replays the same request, and the thin edge (`http.money.payments`) leaves it out too.
        del body_json["capture"]
    return payment_answer(request, body, body_json)


def payment_answer(request: Request, body: schemas.PaymentCreate, body_json: Any) -> Response:
    """The answer to a payment whose body `schemas.PaymentCreate` accepts (`body_json` its
    `model_dump(mode="json")`), the caller authenticated: the one home of what both edges do
    past the body (the key, the currency, the metadata's bounds, the write and the processor
    call, the answer). Blocking: called on a worker thread."""
    scope, new = payment_request(request, body, body_json)
    outcome, replayed = payments.create_payment(
        request.app.state.database,
        request.app.state.processor,
        scope,
        new,
        timings=payment_timings(request),
        render_refusal=render_refusal,
    )
    return idempotent.response(outcome, replayed)


async def payment_answer_on_loop(request: Request, body: schemas.PaymentCreate, body_json: Any) -> Response:
    """`payment_answer` from the event loop (the thin edge's): the same request rules, then
    `payments.create_on_loop`, whose writes need no worker thread."""
    scope, new = payment_request(request, body, body_json)
    outcome, replayed = await create_on_loop.create_payment(
        request.app.state.database,
        request.app.state.processor,
        scope,
        new,
        timings=payment_timings(request),
        render_refusal=render_refusal,
    )
    return idempotent.response(outcome, replayed)


def payment_request(
    request: Request, body: schemas.PaymentCreate, body_json: Any
) -> tuple[idempotency.KeyScope, NewPayment]:
    """The key's scope and the payment, the request's rules checked (the key, the currency,
    the metadata's bounds): what both answers start from. No I/O."""
    who = caller(request)
    tenant_id = who.tenant_id
    key = idempotent.header_key(request, required=True)
    assert key is not None
    settings = request.app.state.settings
    if not is_known_currency(body.currency):
        raise UnsupportedCurrency(f"unknown currency {body.currency!r}", param="currency")
    check_metadata(body.metadata, keys_max=settings.metadata_keys_max, bytes_max=settings.metadata_bytes_max)
    started_us = now_us()
    scope = idempotency.KeyScope(
        tenant_id=tenant_id,
        key=key,
        request_fingerprint=idempotency.fingerprint(request.method, idempotent.request_path(request), body_json),
        now_us=started_us,
        expires_at_us=None,  # a payment moves money: its key is kept forever, like a transfer's
    )
    new = NewPayment(
        amount_minor=body.amount_minor,
        currency=body.currency,
        source_type=body.source.type,
        source_token=body.source.token,
        destination_account_id=body.destination_account,
        description=body.description,
        metadata=body.metadata,
        actor=who.actor,
        capture=body.capture,
    )
    return scope, new


def payment_timings(request: Request) -> PaymentTimings:
    """The payment calls' timings from the settings: the API's routes and the console's capture and
    cancel (`http/console/capture.py`) use the same."""
    settings = request.app.state.settings
    return PaymentTimings(
        processing_stale_ms=settings.processing_stale_ms,
        wait_ms=settings.idempotency_wait_ms,
        first_retry_ms=settings.resolver_backoff_ms,
    )


_CAPTURE_RESPONSES = {
    **ERRORS,
    200: {"description": "Captured: the payment in succeeded, amount_captured_minor set, the rest released"},
    202: {"description": "No answer from the processor: the payment in_doubt, in_doubt_operation capture"},
    404: {"description": "payment_not_found"},
    409: {"description": "payment_not_capturable: not in requires_capture (body adds `payment`, as it is)"},
    422: {"description": "amount_too_large: more than amount_capturable_minor"},
}
_CANCEL_RESPONSES = {
    **ERRORS,
    200: {"description": "Canceled: the payment in canceled, cancellation_reason requested, all released"},
    202: {"description": "No answer from the processor: the payment in_doubt, in_doubt_operation cancel"},
    404: {"description": "payment_not_found"},
    409: {"description": "payment_not_cancelable: not in requires_capture (body adds `payment`, as it is)"},
}


@router.post("/{payment_id}/capture", responses=_CAPTURE_RESPONSES, openapi_extra=IDEMPOTENT)
def capture_payment(payment_id: str, body: schemas.PaymentCapture, request: Request) -> Response:
    """requires_capture -> succeeded: capture all (`amount_minor` omitted) or part of an
    authorization, once; the rest is released. A lost answer: 202 `in_doubt`."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.payment_operations` is
    # matched first and serves a well-formed capture itself; it hands this route every other body.
    if "amount_minor" in body.model_fields_set and body.amount_minor is None:
        raise InvalidAmount("amount_minor must be a positive integer, or left out", param="amount_minor")  # §2
    return capture_answer(request, payment_id, body.amount_minor, body.model_dump(mode="json", exclude_none=True))


def capture_answer(request: Request, payment_id: str, amount_minor: int | None, body_json: Any) -> Response:
    """The answer to a capture whose body `schemas.PaymentCapture` accepts (`body_json` its
    `model_dump(mode="json", exclude_none=True)`), the caller authenticated: the one home of
    what both edges do past the body. Blocking: called on a worker thread."""
    database, processor, scope, options = _operation(request, body_json)
    outcome, replayed = operations.capture(database, processor, scope, payment_id, amount_minor, **options)
    return idempotent.response(outcome, replayed)


async def capture_answer_on_loop(
    request: Request, payment_id: str, amount_minor: int | None, body_json: Any
) -> Response:
    """`capture_answer` from the event loop (the thin edge's, with a transport that calls from
    the loop): the same request rules, then `payments.operations_on_loop`, no worker thread."""
    database, processor, scope, options = _operation(request, body_json)
    outcome, replayed = await operations_on_loop.capture(
        database, processor, scope, payment_id, amount_minor, **options
    )
    return idempotent.response(outcome, replayed)


@router.post("/{payment_id}/cancel", responses=_CANCEL_RESPONSES, openapi_extra=IDEMPOTENT)
def cancel_payment(payment_id: str, request: Request) -> Response:
    """requires_capture -> canceled: void an authorization, all of it released. A lost answer:
    202 `in_doubt`."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.payment_operations` is
    # matched first and serves every cancel itself (it reads no body, as this route does not).
    return cancel_answer(request, payment_id)


def cancel_answer(request: Request, payment_id: str) -> Response:
    """The answer to a cancel, the caller authenticated: the one home of what both edges do.
    Blocking: called on a worker thread."""
    database, processor, scope, options = _operation(request, {})
    outcome, replayed = operations.cancel(database, processor, scope, payment_id, **options)
    return idempotent.response(outcome, replayed)


async def cancel_answer_on_loop(request: Request, payment_id: str) -> Response:
    """`cancel_answer` from the event loop, as `capture_answer_on_loop`."""
    database, processor, scope, options = _operation(request, {})
    outcome, replayed = await operations_on_loop.cancel(database, processor, scope, payment_id, **options)
    return idempotent.response(outcome, replayed)


def _operation(request: Request, body_json: Any) -> tuple[Database, Processor, idempotency.KeyScope, dict[str, Any]]:
    """What a capture's and a cancel's answers start from, on either edge: the database, the
    processor, the key's scope (the key required) and the operation's keywords. No I/O."""
    who = caller(request)
    state = request.app.state
    options = {"actor": who.actor, "timings": payment_timings(request), "render_refusal": render_refusal}
    return state.database, state.processor, _scope(request, who.tenant_id, body_json), options


def _scope(request: Request, tenant_id: str, body: Any) -> idempotency.KeyScope:
    key = idempotent.header_key(request, required=True)
    assert key is not None
    # Money moves: the key is kept forever, like a payment's and a transfer's.
    return idempotent.scope(request, tenant_id=tenant_id, key=key, body=body, keep_forever=True)


@router.get("", responses=ERRORS)
def list_payments(
    request: Request,
    paged: paging.PageQuery,
    status: Literal["processing", "requires_capture", "succeeded", "failed", "in_doubt", "canceled"] | None = None,
) -> Response:
    """Newest first; `?status=in_doubt` is the in-doubt queue."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        page = payments.list_payments(
            connection, tenant_id, status=status, starting_after=paged.starting_after, limit=paged.fetch
        )
    return paged.json(page, _summary)


@router.get("/{payment_id}", responses=ERRORS)
def get_payment(payment_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payload = payments.get_payment_json(connection, tenant_id, payment_id)
    return json_response(200, payload)


@router.get("/{payment_id}/events", responses=ERRORS)
def payment_events(payment_id: str, request: Request, limit: paging.Limit = 100) -> Response:
    """The payment's audit log: state changes, processor calls, webhooks."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payments.MACHINE.load(connection, tenant_id, payment_id)
        found = audit.events_of(connection, tenant_id, payment_id, limit=limit)
    return paging.list_json([event_json(e) for e in found])


def _summary(payment: Payment) -> dict[str, Any]:
    """A list item: the payment without its history (GET the payment for that)."""
    payload = schemas.payment_json(payment, [])
    del payload["history"]
    return payload
