"""`POST /v1/tenants/{tenant_id}/credits` on the thin edge (ADR 0026, decision 4; SPEC §5).

A credit whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`credits.schemas.CreditCreate` accepts) is answered here: authenticated by `http.context` as
the FastAPI route's dependency does (401 before anything about the body), then
`routers.credits.credit_answer`, the one home of the tenant, key, write and answer both edges
share, from the event loop with no worker thread on either database (`authenticate_on_loop`:
on PostgreSQL the key's owner read on the loop's connections; `credits/create.py`: SQLite's
list handed to the writer, PostgreSQL's one call awaited on a connection of the loop,
`db/loop_calls.py`). No dependency injection, no pydantic.

Every other body (not JSON, a repeated key, a wrong type, a missing or extra field, a bound
crossed, a NUL) goes whole to the FastAPI route, with the bytes already read: its validation
answers it with today's status, code, message and `param`, because it is today's code. This
edge therefore only ever accepts a subset of what the route's model accepts, and reads it to
the same values; `tests/integration/http/test_credits_edge.py` holds the two edges to the same
answers, body by body.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.credits.plan import CreditLine
from paycore.credits.schemas import CURRENCY_LENGTH_MAX, DESC_LENGTH_MAX
from paycore.http.context import authenticate_on_loop
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, plain_text, read_object
from paycore.http.routers import credits as credits_router
from paycore.kit.money import AMOUNT_MINOR_MAX

_BODY_KEYS: Final = frozenset({"idempotency_key", "lines"})
_LINE_KEYS: Final = frozenset({"desc", "amount_minor", "currency"})


def read_credit(content_type: str | None, body: bytes) -> tuple[str, tuple[CreditLine, ...], dict[str, Any]] | None:
    """(idempotency key, lines, the body as read) of a well-formed credit; None for any other
    body, which the FastAPI route answers. Accepts only what `CreditCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    document = read_object(content_type, body)
    if document is None or document.keys() != _BODY_KEYS:
        return None
    key, lines = document["idempotency_key"], document["lines"]
    if not plain_text(key, 1, IDEMPOTENCY_KEY_LENGTH_MAX) or type(lines) is not list or not lines:
        return None
    read = []
    for line in lines:  # bounded by the body's size (BodyLimit); their count by the planner
        if type(line) is not dict or line.keys() != _LINE_KEYS:
            return None
        desc, amount_minor, currency = line["desc"], line["amount_minor"], line["currency"]
        if not (plain_text(desc, 0, DESC_LENGTH_MAX) and plain_text(currency, 0, CURRENCY_LENGTH_MAX)):
            return None
        if type(amount_minor) is not int or not 0 < amount_minor <= AMOUNT_MINOR_MAX:
            return None
        read.append(CreditLine(desc, amount_minor, currency))
    return key, tuple(read), document


class _CreditsEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        credit = read_credit(request.headers.get("content-type"), body)
        if credit is None:
            await self.hand_over(scope, body, receive, send)
            return
        await authenticate_on_loop(request)
        key, lines, body_json = credit
        tenant_id: str = scope["path_params"]["tenant_id"]
        response = await credits_router.credit_answer(request, tenant_id, key, lines, body_json)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(credits_router.router, credits_router.create_credit)
ROUTE: Final = Edge(_FALLBACK, _CreditsEndpoint(_FALLBACK))
