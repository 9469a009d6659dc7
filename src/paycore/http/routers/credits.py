"""SPEC §5 (contract): tenant credits."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from paycore.credits import create, schemas
from paycore.credits import service as credits
from paycore.credits.service import Credit, CreditLine
from paycore.http import idempotent
from paycore.http.context import authenticate_async, path_tenant
from paycore.http.errors import dumps, json_response, render_refusal
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute
from paycore.idempotency.service import check_key
from paycore.schemas import TENANT_ID_DOCUMENTED

# Authentication is a dependency so that it runs before body validation (401 before 400).
# The credit endpoint is `async` (ADR 0012): validation and rendering on the event loop, the
# write with SQLite's writer or on PostgreSQL's connections of the loop (`credits/create.py`).
router = APIRouter(
    prefix="/v1/tenants", tags=["credits"], dependencies=[Depends(authenticate_async)], route_class=JsonRoute
)

_CURRENCY = "USD"
# Documented only: a bad id is still our 400 invalid_tenant_id.
TenantIdInPath = Annotated[str, Path(json_schema_extra=TENANT_ID_DOCUMENTED)]


@router.post(
    "/{tenant_id}/credits",
    status_code=201,
    responses={200: {"description": "Replay of an earlier identical request"}, **ERRORS},
)
async def create_credit(tenant_id: TenantIdInPath, body: schemas.CreditCreate, request: Request) -> Response:
    """Add prepaid credit; the idempotency key travels in the body."""
    # The docstring above is the OpenAPI document's. `paycore.http.money.credits` is matched
    # first and serves a well-formed credit itself; it hands this route every other body, whose
    # refusal this route's validation answers as always. This route also declares the endpoint
    # in the OpenAPI document.
    lines = tuple(CreditLine(line.desc, line.amount_minor, line.currency) for line in body.lines)
    return await credit_answer(request, tenant_id, body.idempotency_key, lines, body.model_dump(mode="json"))


async def credit_answer(
    request: Request, tenant_id: str, idempotency_key: str, lines: tuple[CreditLine, ...], body_json: Any
) -> Response:
    """The answer to a credit whose body has the shape of `schemas.CreditCreate`, the caller
    authenticated: the one home of what both edges do past the body (the tenant, the key, the
    write, the answer)."""
    tenant_id = path_tenant(request, tenant_id)
    key = check_key(idempotency_key, param="idempotency_key")
    settings = request.app.state.settings
    key_scope = idempotent.scope(request, tenant_id=tenant_id, key=key, body=body_json, keep_forever=True)
    # The data plane (ADR 0026): planned, then written in one round trip; the reference path
    # answers what that write leaves to it (paycore.credits.create).
    outcome, replayed = await create.create_credit(
        request.app.state.database,
        key_scope,
        lines,
        enabled_currencies=settings.enabled_credit_currencies,
        lines_max=settings.credit_lines_max,
        render=_render,
        render_refusal=render_refusal,
    )
    return idempotent.response(outcome, replayed, replay_status=200)


def _render(credit: Credit) -> str:
    return dumps(schemas.credit_json(credit))


@router.get("/{tenant_id}/balance", responses=ERRORS)
def get_balance(tenant_id: TenantIdInPath, request: Request) -> Response:
    tenant_id = path_tenant(request, tenant_id)
    with request.app.state.database.read() as connection:
        amount_minor = credits.balance_minor(connection, tenant_id, _CURRENCY)
    return json_response(200, schemas.balance_json(_CURRENCY, amount_minor))
