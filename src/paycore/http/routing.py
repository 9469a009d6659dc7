"""What both HTTP apps (paycore's API and the sandbox's) share about their routes: what a path
is served with, for the `Allow` header of a 405 (RFC 9110 §15.5.6), the one way a JSON
request body is read (`JsonRoute`), and what a client that hangs up before its body is read
is answered (`client_disconnected`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, Final

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from paycore.kit import strict_json

log = logging.getLogger(__name__)
_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
_UNREAD: Final = object()
# The status recorded (access line, latency histogram) for a request whose client went away
# before its body was read: nginx's "client closed request". Nobody receives it.
CLIENT_CLOSED_REQUEST: Final = 499


def allowed_methods(request: Request) -> list[str]:
    """The methods the request's path is served with. Each is tried against the app's routes
    as the router matches them: FastAPI keeps one route per method, so the router's own
    `Allow` names only the first route whose path matched."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    ]


class JsonRequest(Request):
    """A request whose JSON body is read by `paycore.kit.strict_json`: once, and never with a
    key repeated in one object. FastAPI reads a route's body through `json()`."""

    _read: Any = _UNREAD

    async def json(self) -> Any:
        if self._read is _UNREAD:
            self._read = strict_json.loads(await self.body())
        return self._read

    async def read_json_body(self) -> None:
        """Read a JSON-typed body now, so that a repeated key is refused (`DuplicateJsonKey`)
        by the app's own error handlers: raised from `json()`, FastAPI would turn it into its
        own 400. A body that is not JSON at all is left to FastAPI (400 `invalid_json`)."""
        if not _is_json(self.headers.get("content-type")):
            return
        body = await self.body()
        if not body:
            return
        # Not JSON, not UTF-8, or nested past Python's recursion limit: FastAPI reads it again
        # and refuses it as it always has.
        with contextlib.suppress(ValueError, RecursionError):
            await self.json()


def _is_json(content_type: str | None) -> bool:
    """FastAPI's rule for a body it reads as JSON: `application/json` or `application/*+json`.
    (paycore's BodyLimit gives a body sent without a type `application/json`.)"""
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


class JsonRoute(APIRoute):
    """The route class of both apps (asserted by `assert_json_routes`): whatever FastAPI reads
    of a request's body as JSON, it reads through `JsonRequest`. A route declaring a body has it
    read before anything else runs, so that a repeated key is the app's own 400
    `duplicate_json_key`. (A body FastAPI reads for a route that does not declare one, through a
    router's dependency, would still be refused, as FastAPI's 400 `http_error`: paycore has none.)
    A route that takes no body reads none, as before: it ignores a body it is sent, malformed or
    not. The processor's webhook reads its own bytes and parses them with `strict_json` once
    their signature is checked."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        declares_body = self.body_field is not None

        async def handle_json(request: Request) -> Response:
            strict = JsonRequest(request.scope, request.receive)
            if declares_body:
                await strict.read_json_body()
            return await handle(strict)

        return handle_json


def add_routes(app: FastAPI, *routers: APIRouter) -> None:
    """Serve the routers' routes as they are: the route objects made once, when their module was
    imported, shared by every app of the process.

    `app.include_router` wraps a router, and FastAPI then makes each of its routes again (their
    parameters' and responses' pydantic adapters), per app, on the app's first request that
    reaches the router: about 80 ms for paycore's routes, measured through `TestClient` (the
    same code runs on the first request of every `paycore serve`), and a large part of the
    test suite's CPU, where most tests make an app. A route of an `APIRouter` already carries
    the router's prefix, tags, dependencies and `include_in_schema`, and paycore includes its
    routers with no option of its own, so the routes are the same either way
    (tests/integration/http/test_routes.py holds them to it).
    """
    app.router.routes.extend(route for router in routers for route in router.routes)


def assert_json_routes(app: FastAPI) -> None:
    """No route of `app` reads a body past `strict_json` (a router made without
    `route_class=JsonRoute` would): a programmer's error, caught when the app is made."""
    loose = [
        route.path for route in _routes(app.routes) if isinstance(route, APIRoute) and not isinstance(route, JsonRoute)
    ]
    assert not loose, f"routes not made with route_class=JsonRoute: {loose}"


def _routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI keeps an included router whole
        if included is None:
            yield route
        else:
            yield from _routes(included.routes)


def client_disconnected(request: Request, _error: Exception) -> Response:
    """The client hung up before its body was read in full (Starlette's `ClientDisconnect`): not
    the server's failure, so not a 500 with a traceback. One INFO line, and 499 as the status the
    access line and the latency histogram record (the answer goes nowhere)."""
    route = getattr(request.scope.get("route"), "path", None) or "unmatched"
    log.info(
        "client disconnected before its request body was read: %s %s",
        request.method,
        route,
        extra={"event": "client_disconnected", "method": request.method, "route": route},
    )
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def answer_client_disconnects(app: FastAPI) -> None:
    app.add_exception_handler(ClientDisconnect, client_disconnected)
