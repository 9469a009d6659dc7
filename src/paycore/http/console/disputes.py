"""Disputes in the console (SPEC §6.2): the queue, nearest evidence deadline
first with the time left; a dispute's page with its history, the payment's timeline and the
evidence form; accept, with four eyes above the tenant's approval threshold.

The answers go through the same domain function as `POST /v1/disputes/{id}/evidence` and
`/accept` (`disputes.answers.answer`): the processor called outside any transaction, once per
idempotency key (each form carries its own, rendered into it: a double click answers once), a
lost answer 202 and shown as waiting for the processor until evidence settles it. The actor is
the person (`operator:NAME`). Above the threshold an accept is asked for, and an approver other
than who asked sends it under the asker's key (`disputes.approvals`, `operators.four_eyes`).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from paycore.audit import service as audit
from paycore.disputes import answers, approvals, states
from paycore.disputes import service as disputes
from paycore.disputes.schemas import EVIDENCE_TEXT_LENGTH_MAX, EvidenceSubmit
from paycore.disputes.types import Dispute
from paycore.http.console import forms, render, scope, session, timeline
from paycore.http.console.scope import KINDS, BadFilter
from paycore.http.errors import render_refusal, status_of
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError, InvalidRequest, NotFound
from paycore.operators import service as operators
from paycore.operators.types import Principal
from paycore.tenants import settings as tenant_settings

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(session.principal)]
# The queue's status filter: `open` (the default: every dispute not closed), `closed`, or one status.
OPEN_STATUSES: Final = (states.WARNING_NEEDS_RESPONSE, states.NEEDS_RESPONSE, states.UNDER_REVIEW)
CLOSED_STATUSES: Final = tuple(status for status in states.STATUSES if status in states.TERMINAL)
GROUPS: Final = {"open": OPEN_STATUSES, "closed": CLOSED_STATUSES, "all": states.STATUSES}
FILTERS: Final = ("status", "tenant")
ANSWER_CALLS: Final = ("processor.submit_evidence", "processor.accept_dispute")
STATUS_QUERY: Final = "processor.get_dispute"
# The form reader's bound on the evidence, above the rule's (1 to 20,000: `EvidenceSubmit`), so a
# text a little too long is refused by the rule, on the dispute's page, the form holding it.
EVIDENCE_FORM_CHARS_MAX: Final = 2 * EVIDENCE_TEXT_LENGTH_MAX


class DisputeMissing(NotFound):
    code = "not_found"


class InvalidEvidence(InvalidRequest):
    code = "invalid_evidence"


# ---------------------------------------------------------------------------- pages


@router.get("/disputes")
def queue(request: Request, who: Who) -> Response:
    """Open disputes (or the filtered ones), the nearest `evidence_due_by` first, 50 a page."""
    given = forms.given(request, FILTERS)
    try:
        statuses = _statuses(given["status"] or "open")
        tenant_id = scope.tenant_of(who, given["tenant"])
        after = _cursor(request.query_params.get("after", ""))
    except BadFilter as error:
        return _queue_page(request, given, [], None, 400, flash=str(error), flash_error=True)
    with request.app.state.database.read() as connection:
        found = disputes.by_due(
            connection, tenant_id=tenant_id, statuses=statuses, after=after, limit=scope.PAGE_ROWS + 1
        )
        waiting = approvals.open_requests(connection, found[: scope.PAGE_ROWS])
    more = None
    if len(found) > scope.PAGE_ROWS:
        last = found[scope.PAGE_ROWS - 1]
        more = f"{last.evidence_due_by_us}.{last.tenant_id}.{last.id}"
    return _queue_page(request, given, found[: scope.PAGE_ROWS], more, 200, waiting=waiting)


def _queue_page(
    request: Request, given: dict[str, str], rows: list[Dispute], more: str | None, status: int, **extra: Any
) -> Response:
    extra.setdefault("waiting", {})
    groups = [*GROUPS, *states.STATUSES]
    return render.page(
        request, "disputes.html", status, rows=rows, given=given, more=more, groups=groups, now=now_us(), **extra
    )


def _statuses(raw: str) -> tuple[str, ...]:
    if raw in GROUPS:
        return GROUPS[raw]
    if raw in states.STATUSES:
        return (raw,)
    raise BadFilter(f"status must be one of {', '.join([*GROUPS, *states.STATUSES])}")


def _cursor(raw: str) -> tuple[int, str, str] | None:
    """The next page's cursor, `due_us.tenant.id`, as the Next page link wrote it."""
    if not raw:
        return None
    due, _, rest = raw.partition(".")
    tenant_id, _, dispute_id = rest.rpartition(".")
    if not due.isascii() or not due.isdigit() or len(due) > 19 or not tenant_id or not dispute_id:
        raise BadFilter("after must be the cursor the Next page link carries")
    return int(due), tenant_id[:64], dispute_id[:64]


@router.get("/disputes/{dispute_id}")
def dispute_page(request: Request, who: Who, dispute_id: str) -> Response:
    return dispute_view(request, who, dispute_id)


def dispute_view(request: Request, who: Principal, dispute_id: str, status: int = 200, **extra: Any) -> Response:
    """The dispute's facts and history, its accept request, what it waits for, the evidence
    form, and its payment's timeline. `extra`: a refused form shown again (`typed`, `flash`)."""
    now = now_us()
    with request.app.state.database.read() as connection:
        dispute = disputes.find_any(connection, dispute_id, tenant_id=who.scope)
        if dispute is None:
            return _missing(request, dispute_id)
        history = audit.events_of(connection, dispute.tenant_id, dispute.id, limit=timeline.EVENTS_MAX)
        payment = KINDS["payments"].machine.find(connection, dispute.tenant_id, dispute.payment_id)
        transfers = [payment.transfer_id] if payment is not None else []
        transfers += [t for t in (dispute.withdrawal_transfer_id, dispute.reinstatement_transfer_id) if t]
        story = timeline.story(connection, dispute.tenant_id, dispute.payment_id, transfers)
        pending = approvals.open_request(connection, dispute)
        threshold = tenant_settings.get(connection, dispute.tenant_id).refund_approval_threshold_minor
    return render.page(
        request,
        "dispute.html",
        status,
        dispute=dispute,
        payment=payment,
        history=[timeline.entry_of(event) for event in history],
        story=story,
        pending=pending,
        threshold=threshold,
        four_eyes=approvals.needs_approval(dispute.amount_minor, threshold),
        takes_answer=dispute.status in states.OPEN,
        unanswered=_unanswered(dispute, history),
        now=now,
        **extra,
    )


def _unanswered(dispute: Dispute, history: list[audit.Event]) -> audit.Event | None:
    """The last answer sent whose reply was lost, when nothing the processor said came since
    (a change, a webhook, an answered status query) and the dispute still takes an answer: the
    page shows it waiting for the processor."""
    if dispute.status not in states.OPEN:
        return None
    for event in reversed(history):
        if event.kind in ("state_change", "webhook"):
            return None
        if event.kind != "processor_call":
            continue
        if event.type == STATUS_QUERY and event.cause == "answered":
            return None  # the processor said how the dispute stands: that answer was not taken
        if event.type in ANSWER_CALLS:
            return None if event.cause in ("answered", "refused") else event
    return None


def _missing(request: Request, dispute_id: str) -> Response:
    message = f"No dispute {dispute_id} here."
    return render.page(request, "refused.html", 404, heading="No such dispute", message=message, back="/ops/disputes")


# ---------------------------------------------------------------------------- actions


@router.post("/disputes/{dispute_id}/evidence")
async def submit_evidence(request: Request, who: Who, dispute_id: str) -> Response:
    """The evidence form: 1 to 20,000 characters, sent once per the form's key."""
    fields = await session.form(request, long_fields={"text": EVIDENCE_FORM_CHARS_MAX})
    typed = {"text": fields.get("text", "")}
    try:
        operators.require(who, "answer_dispute")
        key = idempotency.check_key(fields.get("idempotency_key", ""), param="idempotency_key")
        text = _evidence_text(fields.get("text", ""))
        dispute = _dispute(request, who, dispute_id)
        given = answers.Answer(answers.EVIDENCE, text=text, metadata=None)
        outcome = await run_in_threadpool(_answer, request, who, dispute, given, {"text": text}, key)
    except DomainError as error:
        return _refused(request, who, dispute_id, status_of(error), error.message, typed)
    return _answered(request, who, dispute_id, outcome, "Evidence sent", typed)


def _evidence_text(text: str) -> str:
    try:
        return EvidenceSubmit(text=text).text  # the API's own rule: 1 to 20,000 characters
    except ValidationError as error:
        raise InvalidEvidence(
            f"the evidence must be 1 to {EVIDENCE_TEXT_LENGTH_MAX:,} characters ({len(text):,} were sent)",
            param="text",
        ) from error


@router.post("/disputes/{dispute_id}/accept")
async def accept(request: Request, who: Who, dispute_id: str) -> Response:
    """Accept (concede) the dispute: sent at once up to the tenant's approval threshold; above
    it, asked for, for an approver other than who asked."""
    fields = await session.form(request)
    try:
        operators.require(who, "answer_dispute")
        key = idempotency.check_key(fields.get("idempotency_key", ""), param="idempotency_key")
        dispute = _dispute(request, who, dispute_id)
        with request.app.state.database.read() as connection:
            threshold = tenant_settings.get(connection, dispute.tenant_id).refund_approval_threshold_minor
        if threshold is not None and approvals.needs_approval(dispute.amount_minor, threshold):
            limit = threshold

            def ask(connection: Connection) -> approvals.AcceptRequest:
                return approvals.request(
                    connection, dispute, key=key, threshold_minor=limit, actor=who.actor, now_us=now_us()
                )

            await run_in_threadpool(request.app.state.database.transaction, ask)
            notice = (
                f"Accept asked for: {render.money(dispute.amount_minor, dispute.currency)} is above the approval "
                f"threshold of {render.money(threshold, dispute.currency)}; an approver other than you sends it."
            )
            return _back(dispute_id, notice)
        outcome = await run_in_threadpool(_answer, request, who, dispute, answers.Answer(answers.ACCEPT), {}, key)
    except DomainError as error:
        return _refused(request, who, dispute_id, status_of(error), error.message, {})
    return _answered(request, who, dispute_id, outcome, "Accepted", {})


@router.post("/disputes/{dispute_id}/accept/approve")
async def approve_accept(request: Request, who: Who, dispute_id: str) -> Response:
    """The second person: sends the asked-for accept under the asker's key."""
    await session.form(request)
    try:
        operators.require(who, "approve_dispute_accept")
        dispute = _dispute(request, who, dispute_id)
        with request.app.state.database.read() as connection:
            pending = approvals.approver_may(connection, dispute, who.actor)
        given = answers.Answer(answers.ACCEPT)
        outcome = await run_in_threadpool(_answer, request, who, dispute, given, {}, pending.idempotency_key)
        if outcome.status != 202:  # a lost answer leaves the request open: approving again resends it

            def close(connection: Connection) -> None:
                approvals.approved(
                    connection, dispute, pending, answer_status=outcome.status, actor=who.actor, now_us=now_us()
                )

            await run_in_threadpool(request.app.state.database.transaction, close)
    except DomainError as error:
        return _refused(request, who, dispute_id, status_of(error), error.message, {})
    return _answered(request, who, dispute_id, outcome, f"Approved {pending.requested_by}'s accept", {})


@router.post("/disputes/{dispute_id}/accept/cancel")
async def cancel_accept(request: Request, who: Who, dispute_id: str) -> Response:
    """Withdraw an asked-for accept: an approver, or whoever asked for it."""
    await session.form(request)

    def work(connection: Connection) -> str:
        dispute = _dispute_in(connection, who, dispute_id)
        pending = approvals.open_request(connection, dispute)
        if pending is not None and pending.requested_by != who.actor:
            operators.require(who, "approve_dispute_accept")
        done = approvals.cancel(connection, dispute, actor=who.actor, now_us=now_us())
        return f"{done.requested_by}'s accept canceled: the dispute still takes evidence."

    try:
        operators.require(who, "answer_dispute")
        notice = await run_in_threadpool(request.app.state.database.transaction, work)
    except DomainError as error:
        return _refused(request, who, dispute_id, status_of(error), error.message, {})
    return _back(dispute_id, notice)


@router.post("/disputes/{dispute_id}/refresh")
async def refresh(request: Request, who: Who, dispute_id: str) -> Response:
    """Ask the processor how the dispute stands now (`answers.refresh`, the status query)."""
    await session.form(request)
    try:
        operators.require(who, "ask_again")
        dispute = _dispute(request, who, dispute_id)
        state = request.app.state
        result = await run_in_threadpool(answers.refresh, state.database, state.processor, dispute, actor=who.actor)
    except DomainError as error:
        return _refused(request, who, dispute_id, status_of(error), error.message, {})
    said = {
        "applied": "The processor's word is applied.",
        "stale": "The processor says nothing new.",
        "no_answer": "No answer from the processor either: ask again later.",
    }
    return _back(dispute_id, said.get(result, result))


# ---------------------------------------------------------------------------- shared


def _dispute(request: Request, who: Principal, dispute_id: str) -> Dispute:
    with request.app.state.database.read() as connection:
        return _dispute_in(connection, who, dispute_id)


def _dispute_in(connection: Connection, who: Principal, dispute_id: str) -> Dispute:
    found = disputes.find_any(connection, dispute_id, tenant_id=who.scope)
    if found is None:
        raise DisputeMissing(f"no dispute {dispute_id} here")
    return found


def _answer(
    request: Request, who: Principal, dispute: Dispute, given: answers.Answer, body: dict[str, Any], key: str
) -> idempotency.Outcome:
    """Through the API's own domain function, the key kept forever (an answer gives up money
    or asks for it back), the fingerprint the console's path and the form's body."""
    key_scope = idempotency.KeyScope(
        tenant_id=dispute.tenant_id,
        key=key,
        request_fingerprint=idempotency.fingerprint("POST", f"/ops/disputes/{dispute.id}/{given.kind}", body),
        now_us=now_us(),
        expires_at_us=None,
    )
    state = request.app.state
    outcome, _ = answers.answer(
        state.database, state.processor, key_scope, dispute.id, given, actor=who.actor, render_refusal=render_refusal
    )
    return outcome


def _answered(
    request: Request, who: Principal, dispute_id: str, outcome: idempotency.Outcome, done: str, typed: dict[str, str]
) -> Response:
    body = json.loads(outcome.body)
    if outcome.status == 202:
        return _back(
            dispute_id,
            f"{done}, but no answer from the processor: waiting for the processor (the dispute is "
            f"{body['status']} as paycore holds it). Its webhooks, a status query or sending again settle it.",
        )
    if outcome.status >= 400:
        return _refused(request, who, dispute_id, outcome.status, str(body.get("message", "")), typed)
    return _back(dispute_id, f"{done}: the dispute is {body['status']}.")


def _refused(
    request: Request, who: Principal, dispute_id: str, status: int, message: str, typed: dict[str, str]
) -> Response:
    """The dispute's page again with the reason (400, 409, 422), the evidence form holding what
    was typed; anything else (a role, a dispute not found here): the refusal's page."""
    if status in (400, 409, 422):
        return dispute_view(request, who, dispute_id, status, flash=message, flash_error=True, typed=typed)
    back = f"/ops/disputes/{dispute_id}"
    return render.page(request, "refused.html", status, heading="Refused", message=message, back=back)


def _back(dispute_id: str, notice: str) -> Response:
    query = urllib.parse.urlencode({"notice": notice})
    return RedirectResponse(f"/ops/disputes/{dispute_id}?{query}", status_code=303)
