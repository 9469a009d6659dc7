"""`POST /v1/payouts` and `POST /v1/payouts/{payout_id}/cancel` on the thin edge (ADR 0026,
decision 4; SPEC §11).

A payout whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`payouts.schemas.PayoutCreate` accepts, with or without its optional fields) is answered here:
authenticated by `http.context` as the FastAPI route's dependency does (401 before anything
about the body; on the loop, `authenticate_on_loop`), then `routers.payouts`' answer, the one
home of the key, the write, the audit and the answer both edges share: from the event loop with
no worker thread (`schedule_answer_on_loop`, `payouts/create.py`'s `create_on_loop`: on
PostgreSQL the one call awaited on a connection of the loop's own, `db/loop_calls.py`; on SQLite
the list handed to the writer's group commit). Where that writes nothing (a key that exists, a
refusal, a limit), the reference path answers: on SQLite from the loop too (its transactions
handed to the writer), on PostgreSQL on one worker thread (`idempotent.Reference.on_loop`).
Every other body goes whole to the FastAPI route, with the bytes already read: its validation
answers it as always. This edge therefore only ever accepts a subset of what the route's model
accepts, and reads it to the same values (the defaults filled in, so the key's fingerprint is
the route's).

A cancel takes no body: the FastAPI route reads none and ignores one it is sent, so its edge
reads none either and answers every cancel itself, from the event loop as a payout
(`routers.payouts.cancel_answer_on_loop`, `payouts/cancel.py`'s `cancel_on_loop`: on PostgreSQL
the payout's and its events' reads and the call each awaited on the loop's connections; on
SQLite the reads and the list handed to the writer).
`tests/integration/http/test_payouts_edge.py` holds both edges to the FastAPI routes' answers.
"""

from __future__ import annotations

from typing import Any, Final, get_args

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, plain_text, read_object
from paycore.http.routers import payouts as payouts_router
from paycore.payouts.schemas import BeneficiaryIn, PayoutCreate
from paycore.schemas import CURRENCY_LENGTH, ID_LENGTH_MAX

_FIELDS: Final = frozenset(PayoutCreate.model_fields)
_REQUIRED: Final = frozenset(name for name, field in PayoutCreate.model_fields.items() if field.is_required())
_RAILS: Final = frozenset(get_args(PayoutCreate.model_fields["rail"].annotation))
_EXECUTE_ON: Final = edge.length_bounds(PayoutCreate.model_fields["execute_on"])
# Each beneficiary field in the model's order (as `model_dump` writes them): its bounds, and
# whether it may be left out (its default None).
_BENEFICIARY: Final = tuple(
    (name, edge.length_bounds(field), not field.is_required()) for name, field in BeneficiaryIn.model_fields.items()
)
_BENEFICIARY_FIELDS: Final = frozenset(BeneficiaryIn.model_fields)


def read_payout(content_type: str | None, body: bytes) -> tuple[PayoutCreate, dict[str, Any]] | None:
    """(the payout, its `model_dump(mode="json")`) of a well-formed body; None for any other
    body, which the FastAPI route answers. Accepts only what `PayoutCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    document = read_object(content_type, body)
    if document is None or not _REQUIRED <= document.keys() <= _FIELDS:
        return None
    amount_minor, currency, source_account = document["amount_minor"], document["currency"], document["source_account"]
    rail, execute_on, metadata = document["rail"], document.get("execute_on"), document.get("metadata", {})
    if not (edge.amount_minor(amount_minor) and plain_text(currency, CURRENCY_LENGTH, CURRENCY_LENGTH)):
        return None
    if not (plain_text(source_account, 1, ID_LENGTH_MAX) and type(rail) is str and rail in _RAILS):
        return None
    if not (edge.optional_text(execute_on, *_EXECUTE_ON) and edge.metadata(metadata)):
        return None
    beneficiary = _beneficiary(document["beneficiary"])
    if beneficiary is None:
        return None
    body_json: dict[str, Any] = {
        "amount_minor": amount_minor,
        "currency": currency,
        "source_account": source_account,
        "beneficiary": beneficiary,
        "rail": rail,
        "execute_on": execute_on,
        "metadata": metadata,
    }
    payout = PayoutCreate.model_construct(**{**body_json, "beneficiary": BeneficiaryIn.model_construct(**beneficiary)})
    return payout, body_json


def _beneficiary(value: object) -> dict[str, Any] | None:
    """The beneficiary as `model_dump` writes it (every field, None for one left out)."""
    if type(value) is not dict or not value.keys() <= _BENEFICIARY_FIELDS:
        return None
    read = {}
    for name, (length_min, length_max), optional in _BENEFICIARY:  # bounded: the model's five fields
        text = value.get(name)
        if not (plain_text(text, length_min, length_max) or (optional and text is None)):
            return None
        read[name] = text
    return read


class _ScheduleEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        payout = read_payout(request.headers.get("content-type"), body)
        if payout is None:
            await self.hand_over(scope, body, receive, send)
            return
        await authenticate_on_loop(request)
        response = await payouts_router.schedule_answer_on_loop(request, *payout)
        await response(scope, receive, send)


class _CancelEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No body is read: the FastAPI route reads none (a body sent is ignored, as there).
        request = Request(scope, receive)
        payout_id: str = scope["path_params"]["payout_id"]
        await authenticate_on_loop(request)
        response = await payouts_router.cancel_answer_on_loop(request, payout_id)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_SCHEDULE_FALLBACK: Final = fastapi_route(payouts_router.router, payouts_router.schedule_payout)
ROUTE: Final = Edge(_SCHEDULE_FALLBACK, _ScheduleEndpoint(_SCHEDULE_FALLBACK))
_CANCEL_FALLBACK: Final = fastapi_route(payouts_router.router, payouts_router.cancel_payout)
CANCEL_ROUTE: Final = Edge(_CANCEL_FALLBACK, _CancelEndpoint(_CANCEL_FALLBACK))
