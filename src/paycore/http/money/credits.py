"""`POST /v1/tenants/{tenant_id}/credits` on the thin edge (ADR 0026, decision 4; SPEC §5).

A credit whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the shape
`credits.schemas.CreditCreate` accepts) is answered here: authenticated by `http.context` as
the FastAPI route's dependency does (401 before anything about the body), then
`routers.credits.credit_answer`, the one home of the tenant, key, write and answer both edges
share. No dependency injection, no pydantic, no thread hop on SQLite.

Every other body (not JSON, a repeated key, a wrong type, a missing or extra field, a bound
crossed, a NUL) goes whole to the FastAPI route, with the bytes already read: its validation
answers it with today's status, code, message and `param`, because it is today's code. This
edge therefore only ever accepts a subset of what the route's model accepts, and reads it to
the same values; `tests/integration/http/test_credits_edge.py` holds the two edges to the same
answers, body by body.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.credits.plan import CreditLine
from paycore.credits.schemas import CURRENCY_LENGTH_MAX, DESC_LENGTH_MAX
from paycore.http.context import authenticate_async
from paycore.http.routers import credits as credits_router
from paycore.kit import strict_json
from paycore.kit.money import AMOUNT_MINOR_MAX

_BODY_KEYS: Final = frozenset({"idempotency_key", "lines"})
_LINE_KEYS: Final = frozenset({"desc", "amount_minor", "currency"})
_JSON: Final = "application/json"


def read_credit(content_type: str | None, body: bytes) -> tuple[str, tuple[CreditLine, ...], dict[str, Any]] | None:
    """(idempotency key, lines, the body as read) of a well-formed credit; None for any other
    body, which the FastAPI route answers. Accepts only what `CreditCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    if not body or (content_type is not None and content_type.partition(";")[0].strip().lower() != _JSON):
        return None
    try:
        document = strict_json.loads(body)
    except Exception:  # not JSON, not UTF-8, nested too deep, a repeated key: the route says which
        return None
    if type(document) is not dict or document.keys() != _BODY_KEYS:
        return None
    key, lines = document["idempotency_key"], document["lines"]
    if not _text(key, 1, IDEMPOTENCY_KEY_LENGTH_MAX) or type(lines) is not list or not lines:
        return None
    read = []
    for line in lines:  # bounded by the body's size (BodyLimit); their count by the planner
        if type(line) is not dict or line.keys() != _LINE_KEYS:
            return None
        desc, amount_minor, currency = line["desc"], line["amount_minor"], line["currency"]
        if not (_text(desc, 0, DESC_LENGTH_MAX) and _text(currency, 0, CURRENCY_LENGTH_MAX)):
            return None
        if type(amount_minor) is not int or not 0 < amount_minor <= AMOUNT_MINOR_MAX:
            return None
        read.append(CreditLine(desc, amount_minor, currency))
    return key, tuple(read), document


def _text(value: object, length_min: int, length_max: int) -> bool:
    """A string pydantic reads as itself within these bounds: no NUL (`StrictModel`), and no lone
    surrogate (JSON may escape one; left to pydantic to refuse as it does)."""
    if type(value) is not str or not length_min <= len(value) <= length_max or "\x00" in value:
        return False
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
    return True


class CreditsEdge(Route):
    """Matched ahead of `fallback` (the FastAPI route of the same path and method, which the
    OpenAPI document declares); the access line, metrics and refusal audit see the same route
    template either way."""

    def __init__(self, fallback: APIRoute) -> None:
        assert fallback.methods == {"POST"}, fallback.methods
        endpoint = _CreditsEndpoint(fallback)
        super().__init__(fallback.path, endpoint, methods=["POST"], name=fallback.name, include_in_schema=False)
        assert self.app is endpoint, "served as an ASGI app, with the raw scope"

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self  # what FastAPI's routes put there, for `route_template`
        return match, child_scope


class _CreditsEndpoint:
    """An ASGI app (an object, not a function, so that Starlette hands it the raw scope)."""

    def __init__(self, fallback: APIRoute) -> None:
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        credit = read_credit(request.headers.get("content-type"), body)
        if credit is None:
            await self._hand_over(scope, _replay(body, receive), send)
            return
        await authenticate_async(request)
        key, lines, body_json = credit
        tenant_id: str = scope["path_params"]["tenant_id"]
        response = await credits_router.credit_answer(request, tenant_id, key, lines, body_json)
        await response(scope, receive, send)

    async def _hand_over(self, scope: Scope, receive: Receive, send: Send) -> None:
        match, child_scope = self.fallback.matches(scope)
        assert match is Match.FULL, "the fallback serves the edge's path and method"
        scope.update(child_scope)
        await self.fallback.handle(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the FastAPI route: the body already read, then the client's own messages
    (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _fallback_route() -> APIRoute:
    found = [
        route
        for route in credits_router.router.routes
        if isinstance(route, APIRoute) and route.endpoint is credits_router.create_credit
    ]
    assert len(found) == 1, found
    return found[0]


# Made once, at import, and shared by every app of the process (ADR 0023).
ROUTE: Final = CreditsEdge(_fallback_route())
