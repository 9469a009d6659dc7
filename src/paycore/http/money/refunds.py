"""`POST /v1/payments/{payment_id}/refunds` on the thin edge (ADR 0026, decision 4; SPEC §7.1).

A refund whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`refunds.schemas.RefundCreate` accepts, with or without its reason) is answered here:
authenticated by `http.context` as the FastAPI route's dependency does (401 before anything
about the body; on PostgreSQL the key's owner read on the loop's connections:
`authenticate_on_loop`), then `routers.refunds.refund_answer`, the one home of the key, the
write and the answer both edges share, from the event loop with no worker thread
(`refund_answer_on_loop`, `refunds/create_on_loop.py`: the payment's read and the write handed
to SQLite's writer or awaited on PostgreSQL's connections of the loop, `db/loop_calls.py`; a
refund's creation calls no processor). Only when the write leaves the request to the reference
path (a key that exists, a refusal, a refund that needs approval) does PostgreSQL's run on one
worker thread, as the sync FastAPI route runs it. No dependency injection, no pydantic
validation.

Every other body (not JSON, a repeated key, a wrong type, an extra or missing field, a bound
crossed, a NUL) goes whole to the FastAPI route, with the bytes already read: its validation
answers it as always. This edge therefore only ever accepts a subset of what the route's model
accepts, and reads it to the same values (the reason's default filled in, so the key's
fingerprint is the route's); `tests/integration/http/test_refunds_edge.py` holds the two edges
to the same answers.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, read_object
from paycore.http.routers import refunds as refunds_router
from paycore.refunds.schemas import REASON_LENGTH_MAX, RefundCreate

_FIELDS: Final = frozenset(RefundCreate.model_fields)
_REQUIRED: Final = frozenset(name for name, field in RefundCreate.model_fields.items() if field.is_required())


def read_refund(content_type: str | None, body: bytes) -> tuple[RefundCreate, dict[str, Any]] | None:
    """(the refund, its `model_dump(mode="json")`) of a well-formed body; None for any other
    body, which the FastAPI route answers. Accepts only what `RefundCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    document = read_object(content_type, body)
    if document is None or not _REQUIRED <= document.keys() <= _FIELDS:
        return None
    amount_minor, reason = document["amount_minor"], document.get("reason")
    if not (edge.amount_minor(amount_minor) and edge.optional_text(reason, 1, REASON_LENGTH_MAX)):
        return None
    body_json: dict[str, Any] = {"amount_minor": amount_minor, "reason": reason}
    return RefundCreate.model_construct(**body_json), body_json


class _RefundsEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        refund = read_refund(request.headers.get("content-type"), body)
        if refund is None:
            await self.hand_over(scope, body, receive, send)
            return
        payment_id: str = scope["path_params"]["payment_id"]
        await authenticate_on_loop(request)
        response = await refunds_router.refund_answer_on_loop(request, payment_id, *refund)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(refunds_router.router, refunds_router.create_refund)
ROUTE: Final = Edge(_FALLBACK, _RefundsEndpoint(_FALLBACK))
