"""The console's actions: each a POST form with the session's CSRF token, allowed by
the operator's role, done in one transaction through the domains' services, and answered with a
redirect to the page it came from (a refusal is a page with the refusal's status). Every action
is in the audit log with the person's name (the services record it)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from paycore.http.console import forms, pages, render, scope, session
from paycore.http.console.scope import BY_NAME
from paycore.http.errors import render_refusal, status_of
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError, NotFound
from paycore.lifecycle import recording
from paycore.manual_resolutions import service as resolutions
from paycore.operators import service as operators
from paycore.operators.types import Action, Principal
from paycore.payouts import service as payouts
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import service as reconciliation
from paycore.refunds import service as refunds
from paycore.refunds.service import NewRefund
from paycore.tenants import settings as tenant_settings
from paycore.webhooks import service as webhooks

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(session.principal)]
Work = Callable[[Connection, int], str]  # returns the notice shown on the page it goes back to
TYPED_CHARS_MAX = 500  # of a refused form's field, shown again in it


class Missing(NotFound):
    code = "not_found"


def _back(path: str, notice: str) -> Response:
    return RedirectResponse(f"{path}?{urllib.parse.urlencode({'notice': notice})}", status_code=303)


async def _act(request: Request, who: Principal, action: Action, work: Work, back: str) -> Response:
    try:
        operators.require(who, action)
        database = request.app.state.database
        notice = await run_in_threadpool(database.transaction, lambda connection: work(connection, now_us()))
    except DomainError as error:
        return render.page(
            request, "refused.html", status_of(error), heading="Refused", message=error.message, back=back
        )
    return _back(back, notice)


def _item(connection: Connection, who: Principal, kind: str, object_id: str) -> Any:
    found = scope.find(connection, who, BY_NAME[kind], object_id)
    if found is None:
        raise Missing(f"no {kind} {object_id} here")
    return found


@router.post("/in-doubt/{kind}/{object_id}/ask")
async def ask_again(request: Request, who: Who, kind: str, object_id: str) -> Response:
    await session.form(request)
    checked = resolutions.kind_of(kind)

    def work(connection: Connection, now: int) -> str:
        item = _item(connection, who, checked, object_id)
        asked = recording.ask_again(connection, BY_NAME[checked].machine, item, actor=who.actor, now_us=now)
        other = "the bank" if checked == "payout" else "the processor"
        return f"The worker asks {other} at its next round." if asked else "A worker is asking right now."

    return await _act(request, who, "ask_again", work, f"/ops/{checked}s/{object_id}")


@router.post("/in-doubt/{kind}/{object_id}/propose")
async def propose(request: Request, who: Who, kind: str, object_id: str) -> Response:
    fields = await session.form(request)
    checked = resolutions.kind_of(kind)

    def work(connection: Connection, now: int) -> str:
        item = _item(connection, who, checked, object_id)
        made = resolutions.propose(
            connection,
            item.tenant_id,
            checked,
            item.id,
            outcome=fields.get("outcome", ""),
            evidence=fields.get("evidence", ""),
            actor=who.actor,
            now_us=now,
        )
        return f"Proposed {made.outcome}: a second person (an approver) confirms or rejects it."

    return await _act(request, who, "propose_resolution", work, f"/ops/{checked}s/{object_id}")


@router.post("/in-doubt/{kind}/{object_id}/confirm")
async def confirm(request: Request, who: Who, kind: str, object_id: str) -> Response:
    return await _decide(request, who, kind, object_id, confirmed=True)


@router.post("/in-doubt/{kind}/{object_id}/reject")
async def reject(request: Request, who: Who, kind: str, object_id: str) -> Response:
    return await _decide(request, who, kind, object_id, confirmed=False)


async def _decide(request: Request, who: Principal, kind: str, object_id: str, *, confirmed: bool) -> Response:
    fields = await session.form(request)
    checked = resolutions.kind_of(kind)

    def work(connection: Connection, now: int) -> str:
        item = _item(connection, who, checked, object_id)
        proposal = resolutions.open_proposal(connection, item.tenant_id, checked, item.id)
        decide = resolutions.confirm if confirmed else resolutions.reject
        done = decide(connection, item.tenant_id, proposal.id, actor=who.actor, note=fields.get("note"), now_us=now)
        return f"Manual resolution {done.status}: the {checked} is {done.outcome if confirmed else 'unchanged'}."

    return await _act(request, who, "confirm_resolution", work, f"/ops/{checked}s/{object_id}")


@router.post("/refunds/{refund_id}/approve")
async def approve_refund(request: Request, who: Who, refund_id: str) -> Response:
    await session.form(request)

    def work(connection: Connection, now: int) -> str:
        refund = _item(connection, who, "refund", refund_id)
        refunds.approve(connection, refund.tenant_id, refund.id, actor=who.actor, now_us=now)
        return "Refund approved: the worker sends it to the processor."

    return await _act(request, who, "approve_refund", work, f"/ops/refunds/{refund_id}")


@router.post("/refunds/{refund_id}/cancel")
async def cancel_refund(request: Request, who: Who, refund_id: str) -> Response:
    """An approver cancels, or whoever asked for the refund."""
    await session.form(request)

    def work(connection: Connection, now: int) -> str:
        refund = _item(connection, who, "refund", refund_id)
        if not who.may("cancel_refund") and refunds.requested_by(connection, refund) != who.actor:
            operators.require(who, "cancel_refund")
        refunds.cancel(connection, refund.tenant_id, refund.id, actor=who.actor, now_us=now)
        return "Refund canceled: its amount is refundable again."

    return await _act(request, who, "read", work, f"/ops/refunds/{refund_id}")


@router.post("/payouts/{payout_id}/cancel")
async def cancel_payout(request: Request, who: Who, payout_id: str) -> Response:
    """A scheduled or queued payout canceled by a person (the same compare-and-set against a
    worker's claim as `POST /v1/payouts/{id}/cancel`), its hold released to the source."""
    await session.form(request)

    def work(connection: Connection, now: int) -> str:
        payout = _item(connection, who, "payout", payout_id)
        payouts.cancel(connection, payout.tenant_id, payout.id, now_us=now, actor=who.actor)
        return "Payout canceled: its amount is back in the source account's available balance."

    return await _act(request, who, "cancel_payout", work, f"/ops/payouts/{payout_id}")


@router.post("/payments/{payment_id}/refunds")
async def request_refund(request: Request, who: Who, payment_id: str) -> Response:
    """A refund asked for in the console, its amount typed in major units (`12.50`, `1,250.00`;
    `1250` JPY): the form carries its own idempotency key, so a double click (or a resent form)
    makes one refund. A refused amount shows the payment's page again, the form holding what was
    typed and the reason it was refused, in major units."""
    fields = await session.form(request)
    typed = {name: fields.get(name, "")[:TYPED_CHARS_MAX] for name in ("amount", "reason")}
    try:
        operators.require(who, "request_refund")
        key = idempotency.check_key(fields.get("idempotency_key", ""), param="idempotency_key")
        reason = fields.get("reason", "").strip()[:500] or None
        with request.app.state.database.read() as connection:
            payment = _item(connection, who, "payment", payment_id)
        amount_minor = forms.amount_minor(typed["amount"], payment.currency)
        outcome = await run_in_threadpool(
            _refund_once, request, who, payment.tenant_id, payment_id, amount_minor, reason, key
        )
    except DomainError as error:
        return _refund_refused(request, who, payment_id, status_of(error), error.message, typed)
    body = json.loads(outcome.body)
    if outcome.status >= 400:
        message = _refund_refusal(body, payment.currency, amount_minor)
        return _refund_refused(request, who, payment_id, outcome.status, message, typed)
    return _back(f"/ops/refunds/{body['id']}", f"Refund {body['id']} requested ({body['status']}).")


def _refund_refusal(body: dict[str, Any], currency: str, amount_minor: int) -> str:
    """The refusal for a person: more than is refundable, in the currency's major units."""
    if body.get("error") == "over_refund" and "refundable_minor" in body:
        refundable = render.money(body["refundable_minor"], currency)
        return f"{refundable} is refundable; {render.money(amount_minor, currency)} was typed."
    return str(body.get("message", ""))


def _refund_refused(
    request: Request, who: Principal, payment_id: str, status: int, message: str, typed: dict[str, str]
) -> Response:
    """What was typed was refused (400, 422): the payment's page again, its form filled as it was
    sent. Anything else (a role, a payment not found here): the refusal's page."""
    if status in (400, 422):
        return pages.payment_view(request, who, payment_id, status, flash=message, flash_error=True, typed=typed)
    back = f"/ops/payments/{payment_id}"
    return render.page(request, "refused.html", status, heading="Refused", message=message, back=back)


def _refund_once(
    request: Request, who: Principal, tenant_id: str, payment_id: str, amount_minor: int, reason: str | None, key: str
) -> idempotency.Outcome:
    started = now_us()
    body = {"amount_minor": amount_minor, "reason": reason}
    key_scope = idempotency.KeyScope(
        tenant_id=tenant_id,
        key=key,
        request_fingerprint=idempotency.fingerprint("POST", f"/ops/payments/{payment_id}/refunds", body),
        now_us=started,
        expires_at_us=None,  # moves money: kept forever, like the API's refund keys
    )

    def effect(connection: Connection) -> idempotency.Outcome:
        threshold = tenant_settings.get(connection, tenant_id).refund_approval_threshold_minor
        new = NewRefund(payment_id, amount_minor, reason, key, threshold)
        refund = refunds.create_refund(connection, tenant_id, new, now_us=started, actor=who.actor)
        return idempotency.Outcome(201, json.dumps({"id": refund.id, "status": refund.status}))

    outcome, _ = idempotency.run(request.app.state.database, key_scope, effect, render_refusal)
    return outcome


@router.post("/reconciliation/breaks/{break_id}/resolve")
async def resolve_break(request: Request, who: Who, break_id: str) -> Response:
    fields = await session.form(request)

    def work(connection: Connection, now: int) -> str:
        found = reconciliation_queries.find_break(connection, break_id, tenant_id=who.scope)
        if found is None:
            raise Missing(f"no break {break_id} here")
        note = fields.get("note", "").strip() or None
        resolution = fields.get("resolution", "")
        reconciliation.resolve_break(
            connection, found.tenant_id, found.id, resolution=resolution, note=note, actor=who.actor, now_us=now
        )
        return f"Break resolved ({resolution})."

    return await _act(request, who, "resolve_break", work, f"/ops/reconciliation/breaks/{break_id}")


@router.post("/events/{event_id}/redeliver")
async def redeliver(request: Request, who: Who, event_id: str) -> Response:
    fields = await session.form(request)
    tenant_id = fields.get("tenant_id", "")

    def work(connection: Connection, now: int) -> str:
        if not who.sees(tenant_id):
            raise Missing(f"no event {event_id} here")
        made = webhooks.redeliver(connection, tenant_id, event_id, actor=who.actor, now_us=now)
        return f"Sent again: {len(made)} new deliveries."

    return await _act(request, who, "redeliver", work, "/ops/webhooks")
