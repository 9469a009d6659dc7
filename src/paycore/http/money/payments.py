"""`POST /v1/payments` on the thin edge (ADR 0026, decision 4; SPEC §6).

A payment whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`payments.schemas.PaymentCreate` accepts, with or without its optional fields, `capture` among
them: an authorization too, ADR 0029) is answered here:
authenticated by `http.context` as the FastAPI route's dependency does (401 before anything
about the body), then `routers.payments.payment_answer`, the one home of the key, the currency,
the metadata's bounds, the write, the processor call and the answer both edges share: from the
event loop with no worker thread (`payment_answer_on_loop`, `payments/create_on_loop.py`: the
key's reads, the accept and the settle handed to SQLite's writer or awaited on PostgreSQL's
connections of the loop, `db/loop_calls.py`; the processor called from the loop over plain HTTP).
On PostgreSQL with a transport that blocks (in process, HTTPS) the whole answer runs on one
worker thread, as the FastAPI route runs it (on SQLite, the call and the settle do).
No dependency injection, no pydantic validation.

Every other body (not JSON, a repeated key, a wrong type, a null where the model has a
default, an extra or missing field, a bound crossed, a NUL) goes whole to the FastAPI route,
with the bytes already read: its validation answers it as always. This edge therefore only ever
accepts a subset of what the route's model accepts, and reads it to the same values (the
defaults filled in, so the key's fingerprint is the route's);
`tests/integration/http/test_payments_edge.py` holds the two edges to the same answers.
"""

from __future__ import annotations

from typing import Any, Final, get_args

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, answer_on_thread, fastapi_route, plain_text, read_object
from paycore.http.routers import payments as payments_router
from paycore.payments.schemas import DESCRIPTION_LENGTH_MAX, TOKEN_LENGTH_MAX, PaymentCreate, Source
from paycore.processor.port import loop_caller
from paycore.schemas import CURRENCY_LENGTH, ID_LENGTH_MAX

_FIELDS: Final = frozenset(PaymentCreate.model_fields)
_REQUIRED: Final = frozenset(name for name, field in PaymentCreate.model_fields.items() if field.is_required())
_SOURCE_KEYS: Final = frozenset(Source.model_fields)
_SOURCE_TYPES: Final = frozenset(get_args(Source.model_fields["type"].annotation))
_CAPTURE_METHODS: Final = frozenset(get_args(PaymentCreate.model_fields["capture"].annotation))


def read_payment(content_type: str | None, body: bytes) -> tuple[PaymentCreate, dict[str, Any]] | None:
    """(the payment, its `model_dump(mode="json")`) of a well-formed body; None for any other
    body, which the FastAPI route answers. Accepts only what `PaymentCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    document = read_object(content_type, body)
    if document is None or not _REQUIRED <= document.keys() <= _FIELDS:
        return None
    amount_minor, currency, source = document["amount_minor"], document["currency"], document["source"]
    destination_account = document["destination_account"]
    description, metadata = document.get("description"), document.get("metadata", {})
    capture = document.get("capture", "automatic")
    if not (type(capture) is str and capture in _CAPTURE_METHODS):
        return None
    if not (edge.amount_minor(amount_minor) and plain_text(currency, CURRENCY_LENGTH, CURRENCY_LENGTH)):
        return None
    if type(source) is not dict or source.keys() != _SOURCE_KEYS:
        return None
    source_type, token = source["type"], source["token"]
    if not (type(source_type) is str and source_type in _SOURCE_TYPES and plain_text(token, 1, TOKEN_LENGTH_MAX)):
        return None
    if not plain_text(destination_account, 1, ID_LENGTH_MAX):
        return None
    if not (edge.optional_text(description, 0, DESCRIPTION_LENGTH_MAX) and edge.metadata(metadata)):
        return None
    body_json: dict[str, Any] = {
        "amount_minor": amount_minor,
        "currency": currency,
        "source": {"type": source_type, "token": token},
        "destination_account": destination_account,
        "description": description,
        "metadata": metadata,
    }
    if capture != "automatic":
        # As the route: the default is left out of the fingerprint (`routers.payments.create_payment`).
        body_json["capture"] = capture
    source_model = Source.model_construct(**body_json["source"])
    payment = PaymentCreate.model_construct(**{**body_json, "source": source_model, "capture": capture})
    return payment, body_json


class _PaymentsEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        payment = read_payment(request.headers.get("content-type"), body)
        if payment is None:
            await self.hand_over(scope, body, receive, send)
            return
        state = request.app.state
        if state.database.is_postgres and loop_caller(state.processor) is None:
            # A transport that blocks: one worker thread for the key's calls and the processor
            # call between them (ADR 0006: never inside a transaction), as the FastAPI route.
            response = await answer_on_thread(request, payments_router.payment_answer, *payment)
        else:
            # The key's reads, the accept and the settle from the loop, the call over plain HTTP.
            await authenticate_on_loop(request)
            response = await payments_router.payment_answer_on_loop(request, *payment)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(payments_router.router, payments_router.create_payment)
ROUTE: Final = Edge(_FALLBACK, _PaymentsEndpoint(_FALLBACK))
