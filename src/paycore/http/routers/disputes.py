"""SPEC §6.2: the disputes the processor opened on the tenant's payments, as paycore recorded them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from paycore.disputes import answers, states
from paycore.disputes import service as disputes
from paycore.disputes.schemas import EvidenceSubmit
from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import json_response, render_refusal
from paycore.http.responses import ERRORS, IDEMPOTENT
from paycore.http.routing import JsonRoute
from paycore.ledger.schemas import check_metadata

router = APIRouter(tags=["disputes"], dependencies=[Depends(authenticate)], route_class=JsonRoute)


@router.get("/v1/disputes", responses=ERRORS)
def list_disputes(
    request: Request,
    paged: paging.PageQuery,
    status: Annotated[str | None, Query(max_length=32, json_schema_extra={"enum": list(states.STATUSES)})] = None,
    payment_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    """The tenant's disputes, newest first; `?status=needs_response` for the ones awaiting an
    answer, `?payment_id=` for one payment's."""
    tenant_id = caller(request).tenant_id
    paging.status_filter(status, states.STATUSES)
    with request.app.state.database.read() as connection:
        page = disputes.list_disputes(
            connection,
            tenant_id,
            status=status,
            payment_id=payment_id,
            starting_after=paged.starting_after,
            limit=paged.fetch,
        )
    return paged.json(page, _same)


@router.get("/v1/disputes/{dispute_id}", responses=ERRORS)
def get_dispute(dispute_id: str, request: Request) -> Response:
    """The dispute with its history of state changes (SPEC §6.2)."""
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        payload = disputes.get_dispute_json(connection, tenant_id, dispute_id)
    return json_response(200, payload)


_EVIDENCE_RESPONSES = {
    **ERRORS,
    200: {"description": "Evidence taken: the dispute in under_review (an inquiry stays warning_needs_response)"},
    202: {"description": "No answer from the processor: the dispute as paycore holds it; evidence settles it"},
    404: {"description": "dispute_not_found"},
    409: {"description": "dispute_not_open: the dispute takes no answer now (body adds `dispute`, as it is)"},
}
_ACCEPT_RESPONSES = {
    **ERRORS,
    200: {"description": "Accepted: the dispute lost (an inquiry warning_closed)"},
    202: {"description": "No answer from the processor: the dispute as paycore holds it; evidence settles it"},
    404: {"description": "dispute_not_found"},
    409: {"description": "dispute_not_open: the dispute takes no answer now (body adds `dispute`, as it is)"},
}


@router.post("/v1/disputes/{dispute_id}/evidence", responses=_EVIDENCE_RESPONSES, openapi_extra=IDEMPOTENT)
def submit_evidence(dispute_id: str, body: EvidenceSubmit, request: Request) -> Response:
    """needs_response -> under_review: send the processor evidence (`text`, 1 to 20,000
    characters), once per key. A lost answer: 202 with the dispute, settled by evidence."""
    settings = request.app.state.settings
    check_metadata(body.metadata or {}, keys_max=settings.metadata_keys_max, bytes_max=settings.metadata_bytes_max)
    given = answers.Answer(answers.EVIDENCE, text=body.text, metadata=body.metadata)
    return _answer(request, dispute_id, given, body.model_dump(mode="json", exclude_none=True))


@router.post("/v1/disputes/{dispute_id}/accept", responses=_ACCEPT_RESPONSES, openapi_extra=IDEMPOTENT)
def accept_dispute(dispute_id: str, request: Request) -> Response:
    """needs_response -> lost (an inquiry: warning_closed): accept the dispute, once per key. A
    lost answer: 202 with the dispute, settled by evidence."""
    return _answer(request, dispute_id, answers.Answer(answers.ACCEPT), {})


def _answer(request: Request, dispute_id: str, given: answers.Answer, body: Any) -> Response:
    who = caller(request)
    key = idempotent.header_key(request, required=True)
    assert key is not None
    # An answer to a dispute moves money (or gives it up): the key is kept forever, like a payment's.
    scope = idempotent.scope(request, tenant_id=who.tenant_id, key=key, body=body, keep_forever=True)
    outcome, replayed = answers.answer(
        request.app.state.database,
        request.app.state.processor,
        scope,
        dispute_id,
        given,
        actor=who.actor,
        render_refusal=render_refusal,
    )
    return idempotent.response(outcome, replayed)


def _same(item: dict[str, Any]) -> dict[str, Any]:
    return item
