"""What every thin edge of `paycore.http.money` shares (ADR 0026, decision 4): its route, matched
ahead of the FastAPI route of the same path and method; the hand-over of any body it does not
read itself to that route, with the bytes already read; and the reading of a body as JSON
(`kit.strict_json`) and of a string as pydantic would read it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic.fields import FieldInfo
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.http.context import AuthState, authenticate
from paycore.kit import strict_json
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.kit.threads import run_blocking
from paycore.schemas import METADATA_KEY_LENGTH_MAX, METADATA_KEYS_MAX, METADATA_VALUE_LENGTH_MAX

_JSON = "application/json"
_EXIT_STACK = "fastapi_middleware_astack"  # FastAPI's `AsyncExitStackMiddleware`'s name in the scope


class Edge(Route):
    """Matched ahead of `fallback` (the FastAPI route of the same path and method, which the
    OpenAPI document declares); the access line, metrics and refusal audit see the same route
    template either way."""

    def __init__(self, fallback: APIRoute, endpoint: ASGIApp) -> None:
        assert fallback.methods == {"POST"}, fallback.methods
        super().__init__(fallback.path, endpoint, methods=["POST"], name=fallback.name, include_in_schema=False)
        assert self.app is endpoint, "served as an ASGI app, with the raw scope"

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self  # what FastAPI's routes put there, for `route_template`
        return match, child_scope


class Endpoint:
    """An edge's ASGI app (an object, not a function, so that Starlette hands it the raw scope)."""

    def __init__(self, fallback: APIRoute) -> None:
        self.fallback = fallback

    async def hand_over(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """The FastAPI route answers this request, its body already read."""
        await self._hand_over(scope, replay_body(body, receive), send)

    async def _hand_over(self, scope: Scope, receive: Receive, send: Send) -> None:
        match, child_scope = self.fallback.matches(scope)
        assert match is Match.FULL, "the fallback serves the edge's path and method"
        scope.update(child_scope)
        if _EXIT_STACK in scope:  # the full stack's (`AsyncExitStackMiddleware`, around the router)
            await self.fallback.handle(scope, receive, send)
            return
        # Served by the one pass (`http/lean.py`): the exit stack the full stack would have made,
        # as FastAPI's `AsyncExitStackMiddleware` makes it, for this route alone.
        async with AsyncExitStack() as stack:
            scope[_EXIT_STACK] = stack
            await self.fallback.handle(scope, receive, send)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """`receive` for the FastAPI route: the body already read, then the client's own messages
    (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def read_object(content_type: str | None, body: bytes) -> dict[str, Any] | None:
    """The JSON object a body holds, as the FastAPI route would read it; None for a body that
    route must answer (no body, another media type, not JSON, not UTF-8, nested too deep, a
    repeated key, not an object)."""
    if not body or (content_type is not None and content_type.partition(";")[0].strip().lower() != _JSON):
        return None
    try:
        document = strict_json.loads(body)
    except Exception:  # the route says which
        return None
    return document if type(document) is dict else None


def plain_text(value: object, length_min: int, length_max: int) -> bool:
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


def amount_minor(value: object) -> bool:
    """An amount `paycore.schemas.AmountMinor` reads as itself: a JSON integer (no bool, no
    float, no number as text), 1..2^53-1."""
    return type(value) is int and 0 < value <= AMOUNT_MINOR_MAX


def metadata(value: object) -> bool:
    """Metadata `paycore.schemas.Metadata` reads as itself (its settings' bounds, smaller, are
    the answer's: `ledger.schemas.check_metadata`)."""
    if type(value) is not dict or len(value) > METADATA_KEYS_MAX:
        return False
    return all(
        plain_text(key, 1, METADATA_KEY_LENGTH_MAX) and plain_text(text, 0, METADATA_VALUE_LENGTH_MAX)
        for key, text in value.items()
    )


def optional_text(value: object, length_min: int, length_max: int) -> bool:
    """None, or `plain_text` within these bounds: a `str | None` field with a default of None."""
    return value is None or plain_text(value, length_min, length_max)


def length_bounds(field: FieldInfo) -> tuple[int, int]:
    """(min, max) of a string field declared with `Field(min_length=..., max_length=...)`: the
    model's own bounds, read from it once, at import."""
    found = {
        name: getattr(item, name)
        for item in field.metadata
        for name in ("min_length", "max_length")
        if getattr(item, name, None) is not None
    }
    assert found.keys() == {"min_length", "max_length"}, field.metadata
    return found["min_length"], found["max_length"]


async def answer_on_thread(request: Request, answer: Callable[..., Response], *arguments: Any) -> Response:
    """`answer(request, *arguments)`, blocking (the write, the processor call), on a worker thread,
    the caller authenticated first as the FastAPI route's dependency does (401 before anything
    else). One thread hop on either database, through `kit.threads` (a plain executor, not
    anyio's): SQLite's key read is a WAL read of microseconds,
    made on the event loop (as `authenticate_async`); PostgreSQL's is made on the same thread
    as the answer."""
    auth: AuthState = request.app.state.auth
    if auth.database.is_postgres:
        return await run_blocking(_authenticated, request, answer, *arguments)
    authenticate(request)
    return await run_blocking(answer, request, *arguments)


def _authenticated(request: Request, answer: Callable[..., Response], *arguments: Any) -> Response:
    authenticate(request)
    return answer(request, *arguments)


def fastapi_route(router: APIRouter, endpoint: Any) -> APIRoute:
    """The one FastAPI route of `router` that serves `endpoint`: what an edge hands over to."""
    found = [route for route in router.routes if isinstance(route, APIRoute) and route.endpoint is endpoint]
    assert len(found) == 1, found
    return found[0]
