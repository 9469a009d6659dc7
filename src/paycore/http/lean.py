"""The money requests' one pass (ADR 0026, decision 4).

A POST that a thin edge serves (every `Edge` among the app's routes, picked up when the stack
is built: a new edge needs only its `app.router.routes.insert(0, ...)`) would otherwise cross
ten ASGI layers before its endpoint: `RequestContext`, Starlette's error middleware, FastAPI's
telemetry and body-limit hooks, `ExposureGuard`, `BodyLimit`, `RefusalAudit`, the exception
middleware, FastAPI's exit stack and the router. `LeanDispatch` sits outside all of them and
runs what they do for such a request in one pass:

- the request id, the latency histogram and the access line (`request_id.answered`);
- the exposure rule (`ExposureGuard.serves`): a request it would refuse, or could serve only
  after asking the database whether a key exists yet (local mode, off loopback), goes to the
  full stack, whose `ExposureGuard` answers it: a refusal is never made here;
- the body bound: the refusals before the body (`middleware.refusal_before_body`: NUL 400,
  415, 413 by Content-Length, answered with the route still unmatched, as `BodyLimit` does)
  and the streamed 413, counted in the one `receive` wrapper;
- the refusal audit: a 4xx of an audited route held back until `refusals.record` wrote it;
- the app's exception handlers, through Starlette's `ExceptionMiddleware`, and FastAPI's exit
  stack for the FastAPI route an edge hands a body to (which needs both: made by the hand-over,
  `money.edge.Endpoint.hand_over`), and the app's 500 handler as `ServerErrorMiddleware` runs
  it (answered, then raised to the server).

Everything else, every other method and path, goes to the full stack unchanged. The answers,
headers, access lines, metrics and audit rows are the full stack's
(`tests/integration/http/test_lean_dispatch.py` sends the same requests to both). Not run
here: FastAPI's `ExceptionTelemetryMiddleware`, which only reports an unhandled error to
OpenTelemetry when that is configured (paycore configures none).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterable
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.db.engine import Database
from paycore.http.exposure import ExposureGuard
from paycore.http.metrics import Metrics
from paycore.http.middleware import TooLarge, refusal_before_body, respond, too_large
from paycore.http.money.edge import Edge
from paycore.http.refusals import held_back, record
from paycore.http.request_id import answered, incoming_request_id, response_header
from paycore.kit import ids, logs
from paycore.kit.threads import run_blocking

_SERVER_ERROR_KEYS: Final = (500, Exception)  # what Starlette gives its error middleware


def edges_of(routes: Iterable[BaseRoute]) -> tuple[Edge, ...]:
    """The thin edges among `routes`, in the router's order. An edge must be the first route of
    its path and method, as the router would pick it."""
    edges: list[Edge] = []
    seen_posts: set[str] = set()
    for route in routes:
        if isinstance(route, Edge):
            assert route.path not in seen_posts, f"a route ahead of the edge {route.path}"
            edges.append(route)
        elif isinstance(route, Route) and "POST" in (route.methods or ()):
            seen_posts.add(route.path)
    return tuple(edges)


def by_literal_path(served: tuple[tuple[Edge, ASGIApp], ...]) -> dict[str, tuple[tuple[Edge, ASGIApp], ...]]:
    """The edge (with its app) to try first for each edge path without parameters, when no edge
    ahead of it in the router's order matches that path: one match instead of one per edge, for
    the same route the loop over all of them picks (a path not in this dictionary goes to that
    loop)."""
    found: dict[str, tuple[tuple[Edge, ASGIApp], ...]] = {}
    for index, (edge, app) in enumerate(served):
        if edge.param_convertors:
            continue
        probe: Scope = {"type": "http", "method": "POST", "path": edge.path, "root_path": ""}
        if all(ahead.matches(probe)[0] is Match.NONE for ahead, _ in served[:index]):
            found[edge.path] = ((edge, app),)
    return found


class LeanDispatch:
    def __init__(
        self,
        full: ASGIApp,
        app: Starlette,
        guard: ExposureGuard,
        metrics: Metrics,
        database: Database,
        body_bytes_max: int,
    ) -> None:
        assert not app.debug, "debug answers are the full stack's"
        self.full = full
        self.guard = guard  # only asked whether it would serve a request, never refusing here
        self.router = app.router
        self.metrics = metrics
        self.database = database
        self.body_bytes_max = body_bytes_max
        handlers = {key: value for key, value in app.exception_handlers.items() if key not in _SERVER_ERROR_KEYS}
        server_errors = [value for key, value in app.exception_handlers.items() if key in _SERVER_ERROR_KEYS]
        assert len(server_errors) <= 1 and all(map(inspect.iscoroutinefunction, server_errors)), server_errors
        self.error_handler: Any = server_errors[0] if server_errors else None
        self.edges = edges_of(app.router.routes)
        # Built once: Starlette's exception middleware (the app's handlers) around each edge's
        # endpoint, as the full stack has it around the router. FastAPI's exit stack, which the
        # full stack puts inside it, only the FastAPI route an edge hands a body to reads: the
        # hand-over makes it (`edge.Endpoint.hand_over`), not every request.
        # (Routes compare by value, so they are not dictionary keys: a pair each.)
        self.served: tuple[tuple[Edge, ASGIApp], ...] = tuple(
            (edge, ExceptionMiddleware(edge.app, handlers=handlers)) for edge in self.edges
        )
        self.by_path = by_literal_path(self.served)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            found = self._edge_of(scope)
            if found is not None:
                await self._serve(scope, receive, send, *found)
                return
        await self.full(scope, receive, send)

    def _edge_of(self, scope: Scope) -> tuple[ASGIApp, Scope] | None:
        if not self.guard.serves(scope):
            return None  # the full stack's ExposureGuard refuses it, or asks the database first
        candidates = self.served
        if not scope.get("root_path"):  # the edge of this exact path, else all of them
            candidates = self.by_path.get(scope["path"], candidates)
        for edge, served in candidates:  # bounded: one per money endpoint
            match, child_scope = edge.matches(scope)
            if match is Match.FULL:
                return served, child_scope
        return None

    async def _serve(self, scope: Scope, receive: Receive, send: Send, served: ASGIApp, child_scope: Scope) -> None:
        started_s = time.perf_counter()
        request_id = incoming_request_id(scope) or ids.new_id("req")
        header = response_header(request_id)
        token = logs.set_request_id(request_id)
        scope.setdefault("state", {})  # where `request.state.caller` will be written
        bytes_max = self.body_bytes_max
        status = 500
        started = False  # the answer's start went out
        refused = False  # a streamed body passed the bound: the 413 is the answer
        received: list[bytes] = []  # the body's chunks, for a key that travels in it (credits)
        received_bytes = 0
        held: Message | None = None  # a refusal's start, until it is in the audit log
        chunks: list[bytes] = []

        async def answer(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        async def receiving() -> Message:
            nonlocal received_bytes, refused
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received.append(chunk)
                received_bytes += len(chunk)
                if received_bytes > bytes_max:
                    if not started and not refused:
                        refused = True
                        # The rest of the body is not read: close the connection.
                        await respond(answer, *too_large(bytes_max), close=True)
                    raise TooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal held
            if refused:
                return  # the 413 is the answer; what the endpoint makes of the error is dropped
            if message["type"] == "http.response.start" and held_back(message, scope):
                held = message  # answered once the refusal is in the audit log
                return
            if held is None or message["type"] != "http.response.body":
                await answer(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            await run_blocking(record, self.database, scope, held["status"], body, b"".join(received))
            await answer(held)
            await answer({"type": "http.response.body", "body": body})

        try:
            refusal = refusal_before_body(scope, bytes_max)
            if refusal is not None:
                await respond(answer, *refusal)  # before the router: the route stays unmatched
            else:
                scope.setdefault("router", self.router)
                scope.update(child_scope)  # the route (`Edge.matches` puts it there) and its path's values
                await _endpoint(served, scope, receiving, sending)
        except Exception as error:
            response = await self._server_error(scope, error)  # the handler logs it, answered or not
            if not started:
                await response(scope, receive, answer)
            raise  # to the server, as Starlette's error middleware does
        finally:
            answered(self.metrics, scope, request_id, status, time.perf_counter() - started_s)
            logs.reset_request_id(token)

    async def _server_error(self, scope: Scope, error: Exception) -> Response:
        if self.error_handler is None:
            return PlainTextResponse("Internal Server Error", status_code=500)
        response: Response = await self.error_handler(Request(scope), error)
        return response


async def _endpoint(served: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    # Answered (413) in `receiving`, or the answer had started: nothing to add.
    with contextlib.suppress(TooLarge):
        await served(scope, receive, send)
