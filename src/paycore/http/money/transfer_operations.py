"""`POST /v1/transfers/{transfer_id}/post`, `/void` and `/reverse` on the thin edge (ADR 0026,
decision 4; SPEC §4).

A post whose body is absent or well formed (JSON, read once by `kit.strict_json`, of exactly the
shape `ledger.schemas.PostRequest` accepts: `{}` or a positive `amount_minor`), and a reversal
whose body is absent or of the shape `ledger.schemas.ReverseRequest` accepts (`{}`, or
`metadata` an object of strings or null), are answered here: authenticated on the loop
(`http.context.authenticate_on_loop`, 401 before anything else, as the FastAPI route's
dependency), then `routers.ledger.post_answer_on_loop` / `reverse_answer_on_loop`, the key's rule
shared with the FastAPI route, and `ledger.resolve_keyed.answer_on_loop`: the data plane's read
and write with no worker thread (PostgreSQL's on the loop's connections, `db/loop_calls.py`;
SQLite's list handed to the writer); only when the data plane declines does PostgreSQL's
reference path take one worker thread. A void reads no body, as its route reads none, and is
always answered here.

Every other body (an `amount_minor` null, of a wrong type or out of bounds, a bool, a float, a
number as text, an extra field, a repeated key, not JSON, ...) goes whole to the FastAPI route,
with the bytes already read: its validation answers it as always (ADR 0017).
`tests/integration/http/test_transfer_operations_edge.py` holds the edge to the route's answers.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, read_object
from paycore.http.routers import ledger as ledger_router
from paycore.ledger.schemas import PostRequest, ReverseRequest

_POST_FIELDS: Final = frozenset(PostRequest.model_fields)
_REVERSE_FIELDS: Final = frozenset(ReverseRequest.model_fields)
_ABSENT: Final = (None, None)  # no body: the route's `body` is None, and so is the key's payload


def read_post(content_type: str | None, body: bytes) -> tuple[int | None, dict[str, Any] | None] | None:
    """(the amount to post or None for all, the body as the route's `model_dump(mode="json")`,
    None for no body) of an absent or well-formed body; None for any other body, which the
    route answers."""
    if not body:
        return _ABSENT
    document = read_object(content_type, body)
    if document is None or not document.keys() <= _POST_FIELDS:
        return None
    if "amount_minor" not in document:
        return None, {"amount_minor": None}
    amount_minor = document["amount_minor"]
    if not edge.amount_minor(amount_minor):
        return None  # null (the route's own refusal), a bool, a float, text, out of bounds
    return amount_minor, {"amount_minor": amount_minor}


def read_reverse(content_type: str | None, body: bytes) -> tuple[dict[str, str] | None, dict[str, Any] | None] | None:
    """(the reversal's metadata or None for the original's, the body as the route's
    `model_dump(mode="json")`, None for no body) of an absent or well-formed body; None for any
    other body, which the route answers."""
    if not body:
        return _ABSENT
    document = read_object(content_type, body)
    if document is None or not document.keys() <= _REVERSE_FIELDS:
        return None
    metadata = document.get("metadata")
    if metadata is not None and not edge.metadata(metadata):
        return None
    return metadata, {"metadata": metadata}


class _PostEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        post = read_post(request.headers.get("content-type"), body)
        if post is None:
            await self.hand_over(scope, body, receive, send)
            return
        transfer_id: str = scope["path_params"]["transfer_id"]
        await authenticate_on_loop(request)
        response = await ledger_router.post_answer_on_loop(request, transfer_id, *post)
        await response(scope, receive, send)


class _VoidEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No body is read: the FastAPI route reads none (a body sent is ignored, as there).
        request = Request(scope, receive)
        transfer_id: str = scope["path_params"]["transfer_id"]
        await authenticate_on_loop(request)
        response = await ledger_router.void_answer_on_loop(request, transfer_id)
        await response(scope, receive, send)


class _ReverseEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        reverse = read_reverse(request.headers.get("content-type"), body)
        if reverse is None:
            await self.hand_over(scope, body, receive, send)
            return
        transfer_id: str = scope["path_params"]["transfer_id"]
        await authenticate_on_loop(request)
        response = await ledger_router.reverse_answer_on_loop(request, transfer_id, *reverse)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_POST_FALLBACK: Final = fastapi_route(ledger_router.router, ledger_router.post_transfer)
POST_ROUTE: Final = Edge(_POST_FALLBACK, _PostEndpoint(_POST_FALLBACK))
_VOID_FALLBACK: Final = fastapi_route(ledger_router.router, ledger_router.void_transfer)
VOID_ROUTE: Final = Edge(_VOID_FALLBACK, _VoidEndpoint(_VOID_FALLBACK))
_REVERSE_FALLBACK: Final = fastapi_route(ledger_router.router, ledger_router.reverse_transfer)
REVERSE_ROUTE: Final = Edge(_REVERSE_FALLBACK, _ReverseEndpoint(_REVERSE_FALLBACK))
