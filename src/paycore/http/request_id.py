"""The outermost ASGI layer (pure ASGI, no per-request task): the request id, the latency
histogram and the access line (SPEC §12).

- The request id is the client's `X-Request-Id` when it is well formed (1-128 characters of
  `[A-Za-z0-9._:-]`), else a new `req_<ULID>`; a malformed one is replaced, never echoed.
  It is set in the logging context for the request (so every line, audit event and
  processor call the request causes carries it) and returned in `X-Request-Id` on every
  response, the error answers of the layers inside (404, 405, 413, 415, 500) included.
- One `http_request` line per request: `request_id`, `tenant_id` (the tenant the request
  acted as, set by `http/context.py`: the path's tenant, else the caller's; null when
  unknown), `method`, `route` (the route template, never the raw path), `status`,
  `latency_ms`.

It sits outside Starlette's error middleware, so an unhandled error's 500 is timed, logged
and carries the header like any other answer.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.http.metrics import Metrics, route_template
from paycore.kit import ids, logs

log = logging.getLogger("paycore.http.access")
REQUEST_ID_LENGTH_MAX: Final = 128
_WELL_FORMED: Final = re.compile(rb"[A-Za-z0-9._:-]{1,%d}" % REQUEST_ID_LENGTH_MAX)
_HEADER: Final = b"x-request-id"


def incoming_request_id(scope: Scope) -> str | None:
    """The client's request id if it is well formed, else None."""
    for name, value in scope["headers"]:
        if name == _HEADER:
            return value.decode("ascii") if _WELL_FORMED.fullmatch(value) else None
    return None


def response_header(request_id: str) -> tuple[bytes, bytes]:
    return _HEADER, request_id.encode("ascii")


class RequestContext:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = incoming_request_id(scope) or ids.new_id("req")
        header = response_header(request_id)
        token = logs.set_request_id(request_id)
        scope.setdefault("state", {})  # where `request.state.caller` will be written
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            answered(self.metrics, scope, request_id, status, time.perf_counter() - started)
            logs.reset_request_id(token)


def answered(metrics: Metrics, scope: Scope, request_id: str, status: int, elapsed_s: float) -> None:
    """A request answered: its latency into the histogram, its access line written."""
    route = route_template(scope)
    metrics.latency.labels(route, scope["method"], str(status)).observe(elapsed_s)
    if log.isEnabledFor(logging.INFO):
        _access_line(scope, request_id, route, status, elapsed_s)


def _access_line(scope: Scope, request_id: str, route: str, status: int, elapsed_s: float) -> None:
    state = scope["state"]
    caller: Any = state.get("caller")
    tenant_id = state.get("tenant_id") or getattr(caller, "tenant_id", None)
    method = scope["method"]
    fields = {
        "event": "http_request",
        "request_id": request_id,
        "tenant_id": tenant_id,
        "method": method,
        "route": route,
        "status": status,
        "latency_ms": int(elapsed_s * 1000),
    }
    # This runs once per request: written directly when that is what `log.info` would end in,
    # else makeRecord + handle, `log.info` without its walk up the stack for the caller's file
    # and line (the same for every access line).
    if logs.write_direct(log, f"{method} {route} {status:d}", fields):
        return
    record = log.makeRecord(
        log.name, logging.INFO, __file__, 0, "%s %s %d", (method, route, status), None, extra=fields
    )
    log.handle(record)
