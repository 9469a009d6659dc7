"""SPEC §4: accounts, balances, transfers (two-phase, reversals, batches), statements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import Response
from sqlalchemy import Connection
from starlette.convertors import StringConvertor, register_url_convertor

from paycore.http import idempotent, paging
from paycore.http.context import authenticate, caller
from paycore.http.errors import dumps, json_response, render_refusal
from paycore.http.responses import ERRORS, IDEMPOTENT, OPTIONALLY_IDEMPOTENT
from paycore.http.routing import JsonRoute
from paycore.idempotency import service as idempotency
from paycore.kit.errors import InvalidAmount, InvalidRequest
from paycore.ledger import batch_keyed, keyed, resolve_keyed, schemas
from paycore.ledger import service as ledger

# Authentication is a dependency so that it runs before body validation (401 before 400).
router = APIRouter(prefix="/v1", tags=["ledger"], dependencies=[Depends(authenticate)], route_class=JsonRoute)


class _NotBatch(StringConvertor):
    """A transfer id in `GET /v1/transfers/{transfer_id}` that is not "batch". OpenAPI matches
    the concrete `/v1/transfers/batch` before the template beside it; Starlette takes the first
    route whose path and method match, so `GET /v1/transfers/batch` was the transfer named
    "batch" (404) and `Allow` there named GET. Now it is 405 with `Allow: POST`, as documented."""

    regex = "(?!batch$)[^/]+"


register_url_convertor("not_batch", _NotBatch())


def _settings(request: Request) -> Any:
    return request.app.state.settings


@router.post("/accounts", status_code=201, responses=ERRORS, openapi_extra=OPTIONALLY_IDEMPOTENT)
def create_account(body: schemas.AccountCreate, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    settings = _settings(request)
    schemas.check_metadata(body.metadata, keys_max=settings.metadata_keys_max, bytes_max=settings.metadata_bytes_max)

    def effect(connection: Connection, now_us: int) -> tuple[int, Any]:
        account = ledger.create_account(
            connection,
            tenant_id,
            code=body.code,
            currency=body.currency,
            normal_balance=body.normal_balance,
            no_overdraft=body.no_overdraft,
            metadata=body.metadata,
            now_us=now_us,
        )
        return 201, schemas.account_json(account)

    key = idempotent.header_key(request, required=False)
    return idempotent.run(
        request,
        tenant_id=tenant_id,
        key=key,
        body=body.model_dump(mode="json"),
        effect=effect,
        keep_forever=False,
    )


@router.get("/accounts/{account_id}", responses=ERRORS)
def get_account(account_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        account = ledger.get_account(connection, tenant_id, account_id)
    return json_response(200, schemas.account_json(account))


@router.get("/accounts/{account_id}/balance", responses=ERRORS)
def get_balance(account_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        account = ledger.get_account(connection, tenant_id, account_id)
    return json_response(200, schemas.balance_json(account))


@router.get("/accounts/{account_id}/entries", responses=ERRORS)
def list_entries(account_id: str, request: Request, paged: paging.PageQuery) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        page, has_more = ledger.list_entries(
            connection, tenant_id, account_id, limit=paged.limit, starting_after=paged.starting_after
        )
    return paging.list_json([schemas.entry_json(e) for e in page], has_more=has_more)


@router.post("/transfers", status_code=201, responses=ERRORS, openapi_extra=IDEMPOTENT)
def create_transfer(body: schemas.TransferCreate, request: Request) -> Response:
    # `paycore.http.money.transfers` is matched first and serves a well-formed transfer itself;
    # it hands this route every other body, whose refusal this route's validation answers as
    # always. This route also declares the endpoint in the OpenAPI document.
    return transfer_answer(request, body, body.model_dump(mode="json"))


def transfer_answer(request: Request, body: schemas.TransferCreate, body_json: Any) -> Response:
    """The answer to a transfer whose body `schemas.TransferCreate` accepts (`body_json` its
    `model_dump(mode="json")`), the caller authenticated: what the FastAPI route does past the
    body. Blocking: called on a worker thread (`transfer_answer_on_loop` is the thin edge's)."""
    scope, build_spec = transfer_request(request, body, body_json)
    outcome, replayed = keyed.create_transfer(
        request.app.state.database, scope, build_spec, _transfer_body, render_refusal
    )
    return idempotent.response(outcome, replayed)


async def transfer_answer_on_loop(request: Request, body: schemas.TransferCreate, body_json: Any) -> Response:
    """`transfer_answer` from the event loop (the thin edge's): the same request rules, then
    `keyed.create_transfer_on_loop`, whose data plane needs no worker thread."""
    scope, build_spec = transfer_request(request, body, body_json)
    outcome, replayed = await keyed.create_transfer_on_loop(
        request.app.state.database, scope, build_spec, _transfer_body, render_refusal
    )
    return idempotent.response(outcome, replayed)


def transfer_request(
    request: Request, body: schemas.TransferCreate, body_json: Any
) -> tuple[idempotency.KeyScope, keyed.BuildSpec]:
    """The key's scope and the transfer's spec, the request's rules checked (the key, the
    metadata's bounds): the one home of what both answers start from. No I/O."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)
    settings = _settings(request)
    _check_transfer_metadata(body, settings, "")

    assert key is not None  # required=True

    def build_spec(now_us: int) -> ledger.TransferSpec:
        return schemas.to_spec(body, entries_max=settings.transfer_entries_max, now_us=now_us)

    return idempotent.scope(request, tenant_id=tenant_id, key=key, body=body_json, keep_forever=True), build_spec


def _transfer_body(transfer: ledger.Transfer) -> str:
    return dumps(schemas.transfer_json(transfer))


@router.post("/transfers/batch", status_code=201, responses=ERRORS, openapi_extra=IDEMPOTENT)
def create_batch(body: schemas.TransferBatch, request: Request) -> Response:
    """Linked transfers: all apply or none."""
    # `paycore.http.money.batches` is matched first and serves a well-formed batch itself; it
    # hands this route every other body, whose refusal this route's validation answers as
    # always. This route also declares the endpoint in the OpenAPI document.
    return batch_answer(request, body, body.model_dump(mode="json"))


def batch_answer(request: Request, body: schemas.TransferBatch, body_json: Any) -> Response:
    """The answer to a batch whose body `schemas.TransferBatch` accepts (`body_json` its
    `model_dump(mode="json")`), the caller authenticated: what the FastAPI route does past the
    body. Blocking: called on a worker thread (`batch_answer_on_loop` is the thin edge's)."""
    scope, build_specs = batch_request(request, body, body_json)
    outcome, replayed = batch_keyed.create_batch(
        request.app.state.database, scope, build_specs, _batch_body, render_refusal
    )
    return idempotent.response(outcome, replayed)


async def batch_answer_on_loop(request: Request, body: schemas.TransferBatch, body_json: Any) -> Response:
    """`batch_answer` from the event loop (the thin edge's): the same request rules, then
    `batch_keyed.create_batch_on_loop`, whose data plane needs no worker thread."""
    scope, build_specs = batch_request(request, body, body_json)
    outcome, replayed = await batch_keyed.create_batch_on_loop(
        request.app.state.database, scope, build_specs, _batch_body, render_refusal
    )
    return idempotent.response(outcome, replayed)


def batch_request(
    request: Request, body: schemas.TransferBatch, body_json: Any
) -> tuple[idempotency.KeyScope, batch_keyed.BuildSpecs]:
    """The key's scope and the transfers' specs, the request's rules checked (the key, the
    batch's bound, each transfer's metadata bounds): the one home of what both answers start
    from. No I/O."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)
    assert key is not None  # required=True
    settings = _settings(request)
    if len(body.transfers) > settings.batch_transfers_max:
        raise InvalidRequest(f"a batch holds at most {settings.batch_transfers_max} transfers", param="transfers")
    for index, transfer in enumerate(body.transfers):
        _check_transfer_metadata(transfer, settings, f"transfers[{index}].")

    def build_specs(now_us: int) -> list[ledger.TransferSpec]:
        return [
            schemas.to_spec(t, entries_max=settings.transfer_entries_max, now_us=now_us, prefix=f"transfers[{i}].")
            for i, t in enumerate(body.transfers)
        ]

    return idempotent.scope(request, tenant_id=tenant_id, key=key, body=body_json, keep_forever=True), build_specs


def _batch_body(batch_id: str, created: Sequence[ledger.Transfer]) -> str:
    return dumps({"object": "batch", "id": batch_id, "transfers": [schemas.transfer_json(t) for t in created]})


@router.get("/transfers/{transfer_id:not_batch}", responses=ERRORS)
def get_transfer(transfer_id: str, request: Request) -> Response:
    tenant_id = caller(request).tenant_id
    with request.app.state.database.read() as connection:
        transfer = ledger.get_transfer(connection, tenant_id, transfer_id)
    return json_response(200, schemas.transfer_json(transfer))


@router.post("/transfers/{transfer_id}/post", responses=ERRORS, openapi_extra=IDEMPOTENT)
def post_transfer(
    transfer_id: str, request: Request, body: Annotated[schemas.PostRequest | None, Body()] = None
) -> Response:
    # `paycore.http.money.transfer_operations` is matched first and serves a well-formed body (or
    # none) itself; it hands this route every other body, whose refusal this route's validation
    # answers as always. This route also declares the endpoint in the OpenAPI document.
    idempotent.header_key(request, required=True)  # its refusal first, as ever
    if body is not None and "amount_minor" in body.model_fields_set and body.amount_minor is None:
        # SPEC §2: null is never an amount. Leaving the field out posts the whole hold.
        raise InvalidAmount(
            "amount_minor must be a positive JSON integer (omit it to post in full)", param="amount_minor"
        )
    amount_minor = None if body is None else body.amount_minor
    payload = None if body is None else body.model_dump(mode="json")
    return post_answer(request, transfer_id, amount_minor, payload)


def post_answer(request: Request, transfer_id: str, amount_minor: int | None, payload: Any) -> Response:
    """The answer to a post whose body the route accepts (`payload` its `model_dump(mode="json")`,
    None for no body), the caller authenticated. Blocking: on a worker thread (`post_answer_on_loop`
    is the thin edge's)."""
    scope = _operation_scope(request, payload)
    operation = resolve_keyed.post(transfer_id, amount_minor, _transfer_body)
    return idempotent.response(*resolve_keyed.answer(request.app.state.database, scope, operation, render_refusal))


async def post_answer_on_loop(request: Request, transfer_id: str, amount_minor: int | None, payload: Any) -> Response:
    """`post_answer` from the event loop (the thin edge's): no worker thread on the data plane."""
    scope = _operation_scope(request, payload)
    operation = resolve_keyed.post(transfer_id, amount_minor, _transfer_body)
    database = request.app.state.database
    return idempotent.response(*await resolve_keyed.answer_on_loop(database, scope, operation, render_refusal))


@router.post("/transfers/{transfer_id}/void", responses=ERRORS, openapi_extra=IDEMPOTENT)
def void_transfer(transfer_id: str, request: Request) -> Response:
    # Served by `paycore.http.money.transfer_operations` (no body is read); declared here.
    return void_answer(request, transfer_id)


def void_answer(request: Request, transfer_id: str) -> Response:
    """The answer to a void, the caller authenticated. Blocking: on a worker thread."""
    scope = _operation_scope(request, None)
    operation = resolve_keyed.void(transfer_id, _transfer_body)
    return idempotent.response(*resolve_keyed.answer(request.app.state.database, scope, operation, render_refusal))


async def void_answer_on_loop(request: Request, transfer_id: str) -> Response:
    """`void_answer` from the event loop (the thin edge's)."""
    scope = _operation_scope(request, None)
    operation = resolve_keyed.void(transfer_id, _transfer_body)
    database = request.app.state.database
    return idempotent.response(*await resolve_keyed.answer_on_loop(database, scope, operation, render_refusal))


@router.post("/transfers/{transfer_id}/reverse", status_code=201, responses=ERRORS, openapi_extra=IDEMPOTENT)
def reverse_transfer(
    transfer_id: str,
    request: Request,
    body: Annotated[schemas.ReverseRequest | None, Body()] = None,
) -> Response:
    # `paycore.http.money.transfer_operations` is matched first, as for a post.
    metadata = None if body is None else body.metadata
    payload = None if body is None else body.model_dump(mode="json")
    return reverse_answer(request, transfer_id, metadata, payload)


def reverse_answer(request: Request, transfer_id: str, metadata: dict[str, str] | None, payload: Any) -> Response:
    """The answer to a reversal whose body the route accepts, the caller authenticated.
    Blocking: on a worker thread."""
    scope = _operation_scope(request, payload)
    operation = resolve_keyed.reverse(transfer_id, metadata, _transfer_body)
    return idempotent.response(*resolve_keyed.answer(request.app.state.database, scope, operation, render_refusal))


async def reverse_answer_on_loop(
    request: Request, transfer_id: str, metadata: dict[str, str] | None, payload: Any
) -> Response:
    """`reverse_answer` from the event loop (the thin edge's)."""
    scope = _operation_scope(request, payload)
    operation = resolve_keyed.reverse(transfer_id, metadata, _transfer_body)
    database = request.app.state.database
    return idempotent.response(*await resolve_keyed.answer_on_loop(database, scope, operation, render_refusal))


def _operation_scope(request: Request, payload: Any) -> idempotency.KeyScope:
    """The key's scope of a post, void or reversal (the key required): the one home of what
    both edges start from. No I/O."""
    tenant_id = caller(request).tenant_id
    key = idempotent.header_key(request, required=True)
    assert key is not None  # required=True
    return idempotent.scope(request, tenant_id=tenant_id, key=key, body=payload, keep_forever=True)


def _check_transfer_metadata(body: schemas.TransferCreate, settings: Any, prefix: str) -> None:
    schemas.check_metadata(
        body.metadata,
        keys_max=settings.metadata_keys_max,
        bytes_max=settings.metadata_bytes_max,
        param=f"{prefix}metadata",
    )
