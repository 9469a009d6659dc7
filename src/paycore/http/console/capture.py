"""Capture later in the console (SPEC §6.1): an operator captures all or part
of an authorized payment, or cancels it, from the payment's page.

Each is a POST form with the session's CSRF token and an idempotency key of its own (rendered
into the form, so a double click or a form sent again captures once), allowed from the role
`operator` (`capture_payment`, `cancel_payment`), and done by the same domain functions as
`POST /v1/payments/{id}/capture` and `/cancel` (`payments.operations`): the same compare-and-set,
the same call to the processor outside any transaction, the same `in_doubt` when its answer is
lost; the actor is the person (`operator:NAME`).

The amount is typed in major units (`12.34` for USD) and read by `forms.amount_minor` (`kit.money.parse_major`), by
string arithmetic in the currency's exponent, never through a float. No four eyes: a capture
collects what the cardholder already authorized, and a cancel releases it; neither pays money
out of the merchant's balance, which is what the tenant's approval threshold guards (a refund).
The API captures on a key's word alone; the console asks no more of a person than of a key.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from paycore.http.console import forms, pages, render, scope, session
from paycore.http.console.scope import KINDS
from paycore.http.errors import render_refusal, status_of
from paycore.http.routers.payments import payment_timings
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError, NotFound
from paycore.operators import service as operators
from paycore.operators.types import Principal
from paycore.payments import operations
from paycore.payments.schemas import capturable_minor
from paycore.payments.types import Payment

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(session.principal)]
TYPED_CHARS_MAX = 100  # of a refused amount, shown again in the form


class PaymentMissing(NotFound):
    code = "not_found"


@router.post("/payments/{payment_id}/capture")
async def capture(request: Request, who: Who, payment_id: str) -> Response:
    """Capture the typed amount (major units) of an authorization; the rest is released."""
    fields = await session.form(request)
    typed = fields.get("amount", "")[:TYPED_CHARS_MAX]
    try:
        operators.require(who, "capture_payment")
        key = idempotency.check_key(fields.get("idempotency_key", ""), param="idempotency_key")
        payment = _payment(request, who, payment_id)
        amount_minor = forms.amount_minor(typed, payment.currency)  # the ceiling: under the row lock
        outcome = await run_in_threadpool(_capture, request, who, payment, amount_minor, key)
    except DomainError as error:
        return _refused(request, who, payment_id, status_of(error), error.message, typed)
    body = json.loads(outcome.body)
    if outcome.status >= 400:
        message = _capture_refusal(body, payment, amount_minor)
        return _refused(request, who, payment_id, outcome.status, message, typed)
    return _back(payment_id, _notice(body))


@router.post("/payments/{payment_id}/cancel")
async def cancel(request: Request, who: Who, payment_id: str) -> Response:
    """Cancel (void) an authorization: all of it is released."""
    fields = await session.form(request)
    try:
        operators.require(who, "cancel_payment")
        key = idempotency.check_key(fields.get("idempotency_key", ""), param="idempotency_key")
        payment = _payment(request, who, payment_id)
        outcome = await run_in_threadpool(_cancel, request, who, payment, key)
    except DomainError as error:
        return _refused(request, who, payment_id, status_of(error), error.message, "")
    body = json.loads(outcome.body)
    if outcome.status >= 400:
        return _refused(request, who, payment_id, outcome.status, str(body.get("message", "")), "")
    return _back(payment_id, _notice(body))


def _payment(request: Request, who: Principal, payment_id: str) -> Payment:
    with request.app.state.database.read() as connection:
        found: Payment | None = scope.find(connection, who, KINDS["payments"], payment_id)
    if found is None:
        raise PaymentMissing(f"no payment {payment_id} here")
    return found


def _capture(request: Request, who: Principal, payment: Payment, amount_minor: int, key: str) -> idempotency.Outcome:
    state = request.app.state
    outcome, _ = operations.capture(
        state.database,
        state.processor,
        _key_scope(payment, "capture", {"amount_minor": amount_minor}, key),
        payment.id,
        amount_minor,
        actor=who.actor,
        timings=payment_timings(request),
        render_refusal=render_refusal,
    )
    return outcome


def _cancel(request: Request, who: Principal, payment: Payment, key: str) -> idempotency.Outcome:
    state = request.app.state
    outcome, _ = operations.cancel(
        state.database,
        state.processor,
        _key_scope(payment, "cancel", {}, key),
        payment.id,
        actor=who.actor,
        timings=payment_timings(request),
        render_refusal=render_refusal,
    )
    return outcome


def _key_scope(payment: Payment, operation: str, body: dict[str, Any], key: str) -> idempotency.KeyScope:
    return idempotency.KeyScope(
        tenant_id=payment.tenant_id,
        key=key,
        request_fingerprint=idempotency.fingerprint("POST", f"/ops/payments/{payment.id}/{operation}", body),
        now_us=now_us(),
        expires_at_us=None,  # moves money: kept forever, like the API's capture keys
    )


def _capture_refusal(body: dict[str, Any], payment: Payment, amount_minor: int) -> str:
    """The refusal for a person: more than is capturable in the currency's major units."""
    if body.get("error") == "amount_too_large":
        capturable = render.money(capturable_minor(payment), payment.currency)
        return f"At most {capturable} is capturable; {render.money(amount_minor, payment.currency)} was typed."
    return str(body.get("message", ""))


def _notice(body: dict[str, Any]) -> str:
    """What the page says after a capture or cancel the processor answered, or did not."""
    currency = body["currency"]
    if body["status"] == "succeeded":
        captured = body["amount_captured_minor"]
        released = render.money(body["amount_minor"] - captured, currency)
        return f"Captured {render.money(captured, currency)}; {released} released."
    if body["status"] == "canceled":
        return f"Authorization canceled: {render.money(body['amount_minor'], currency)} released."
    if body["status"] == "in_doubt":
        return (
            f"No answer from the processor: the payment is in doubt ({body['in_doubt_operation']}). "
            "Only the processor's word ends it; the worker asks it."
        )
    return f"Sent to the processor: the payment is {body['status']}."


def _refused(request: Request, who: Principal, payment_id: str, status: int, message: str, typed: str) -> Response:
    """The payment's page again with the reason (400, 409, 422), the capture form holding what
    was typed; anything else (a role, a payment not found here): the refusal's page."""
    if status in (400, 409, 422):
        extra = {"typed_capture": typed}
        return pages.payment_view(request, who, payment_id, status, flash=message, flash_error=True, **extra)
    back = f"/ops/payments/{payment_id}"
    return render.page(request, "refused.html", status, heading="Refused", message=message, back=back)


def _back(payment_id: str, notice: str) -> Response:
    query = urllib.parse.urlencode({"notice": notice})
    return RedirectResponse(f"/ops/payments/{payment_id}?{query}", status_code=303)
