"""`POST /v1/payments/{payment_id}/capture` and `/cancel` on the thin edge (ADR 0026, decision
4; ADR 0029; SPEC §6.1).

A capture whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`payments.schemas.PaymentCapture` accepts: `{}` or a positive `amount_minor`) is answered here:
authenticated by `http.context` as the FastAPI route's dependency does (401 before anything
about the body), then `routers.payments.capture_answer`, the one home of the key, the phases and
the answer both edges share: from the event loop with no worker thread when the transport can
call from it (`capture_answer_on_loop`, `payments/operations_on_loop.py`: begin and finish
handed to SQLite's writer or awaited on PostgreSQL's connections of the loop,
`db/loop_calls.py`; the capture called from the loop over plain HTTP; the caller authenticated
on the loop, `http.context.authenticate_on_loop`). With a transport that blocks (in process,
HTTPS) the whole answer runs on one worker thread, as the FastAPI route runs it.
Every other body (an `amount_minor` null, of a wrong type or out of bounds, an extra field, not
JSON, ...) goes whole to the FastAPI route, with the bytes already read: its validation answers
it as always. A cancel reads no body, as its route reads none, and is always answered here
(`routers.payments.cancel_answer`, or `cancel_answer_on_loop` as a capture's).
`tests/integration/http/test_payment_operations_edge.py` holds the edges to the route's
answers, `tests/integration/payments/test_operations_on_loop.py` the loop's to the thread's.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, answer_on_thread, fastapi_route, read_object
from paycore.http.routers import payments as payments_router
from paycore.payments.schemas import PaymentCapture
from paycore.processor.port import loop_caller

_FIELDS: Final = frozenset(PaymentCapture.model_fields)


def read_capture(content_type: str | None, body: bytes) -> tuple[int | None, dict[str, Any]] | None:
    """(the amount asked or None for all, the body as the route's `model_dump(mode="json",
    exclude_none=True)`) of a well-formed body; None for any other body, which the route answers."""
    document = read_object(content_type, body)
    if document is None or not document.keys() <= _FIELDS:
        return None
    if "amount_minor" not in document:
        return None, {}
    amount_minor = document["amount_minor"]
    if not edge.amount_minor(amount_minor):
        return None  # null, a bool, a float, text, out of bounds: the route's refusal
    return amount_minor, {"amount_minor": amount_minor}


class _CaptureEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        capture = read_capture(request.headers.get("content-type"), body)
        if capture is None:
            await self.hand_over(scope, body, receive, send)
            return
        payment_id: str = scope["path_params"]["payment_id"]
        if loop_caller(request.app.state.processor) is None:
            # A transport that blocks: one worker thread for the phases and the call between
            # them (ADR 0006: never inside a transaction), as the FastAPI route.
            response = await answer_on_thread(request, payments_router.capture_answer, payment_id, *capture)
        else:
            await authenticate_on_loop(request)
            response = await payments_router.capture_answer_on_loop(request, payment_id, *capture)
        await response(scope, receive, send)


class _CancelEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No body is read: the FastAPI route reads none (a body sent is ignored, as there).
        request = Request(scope, receive)
        payment_id: str = scope["path_params"]["payment_id"]
        if loop_caller(request.app.state.processor) is None:
            response = await answer_on_thread(request, payments_router.cancel_answer, payment_id)
        else:
            await authenticate_on_loop(request)
            response = await payments_router.cancel_answer_on_loop(request, payment_id)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_CAPTURE_FALLBACK: Final = fastapi_route(payments_router.router, payments_router.capture_payment)
CAPTURE_ROUTE: Final = Edge(_CAPTURE_FALLBACK, _CaptureEndpoint(_CAPTURE_FALLBACK))
_CANCEL_FALLBACK: Final = fastapi_route(payments_router.router, payments_router.cancel_payment)
CANCEL_ROUTE: Final = Edge(_CANCEL_FALLBACK, _CancelEndpoint(_CANCEL_FALLBACK))
