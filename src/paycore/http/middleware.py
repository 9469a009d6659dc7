"""Pure ASGI middleware (no per-request task overhead): the request body bound (413), and
NUL characters in the path or query refused (400) before they can reach a database.

A body over the bound that is streamed (chunked, no Content-Length) is refused the moment the
bound is passed: the 413 is sent from inside `receive`, before the app sees the error,
because whatever reads the body (FastAPI) turns any error raised there into its own 400."""

from __future__ import annotations

import contextlib
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.kit.numbers import InvalidNumber, parse_digits


class TooLarge(Exception):
    """Raised from `receive` once a streamed body passed the bound (the 413 already sent)."""


CONSOLE_PREFIX = "/ops/"
FORM_TYPE = b"application/x-www-form-urlencoded"


def _is_console_form(scope: Scope, content_type: bytes) -> bool:
    """The operations console's pages post HTML forms (URL-encoded), and only there."""
    return scope["path"].startswith(CONSOLE_PREFIX) and content_type.lower().startswith(FORM_TYPE)


class BodyLimit:
    """Refuse bodies over `body_bytes_max` with 413, by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, body_bytes_max: int) -> None:
        self.app = app
        self.body_bytes_max = body_bytes_max

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = refusal_before_body(scope, self.body_bytes_max)
        if refusal is not None:
            await respond(send, *refusal)
            return
        await self._streamed(scope, receive, send)

    async def _streamed(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        started = False
        refused = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.body_bytes_max:
                    if not started and not refused:
                        refused = True
                        await self._refuse(send, close=True)
                    raise TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 is the answer; what the app makes of the error is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        # Answered (413) in limited_receive, or the response had started: nothing to add.
        with contextlib.suppress(TooLarge):
            await self.app(scope, limited_receive, tracking_send)

    async def _refuse(self, send: Send, *, close: bool = False) -> None:
        # After a streamed body is refused the rest of it is not read: close the connection.
        await respond(send, *too_large(self.body_bytes_max), close=close)


def too_large(body_bytes_max: int) -> tuple[int, str, str]:
    """The 413's status, code and message."""
    return 413, "request_too_large", f"request bodies are limited to {body_bytes_max} bytes"


def refusal_before_body(scope: Scope, body_bytes_max: int) -> tuple[int, str, str] | None:
    """What refuses a request before its body is read (status, code, message), else None: a NUL
    in the path or query (400), a body that is not JSON (415), a Content-Length over the bound
    (413). A request without a Content-Type is given `application/json`, in place."""
    if "\x00" in scope["path"] or b"%00" in scope["query_string"].lower():
        return 400, "invalid_request", "the path and query may not contain NUL characters"
    content_type = _header(scope, b"content-type")
    if content_type is None:
        # The API speaks only JSON: a body sent without any Content-Type is read as JSON
        # rather than refused with a puzzling validation error. (`curl -d` sends a form
        # type of its own: that is a 415 telling the client to send application/json.)
        # In place (the scope is this request's own): outer middleware reads what the router
        # writes into it, e.g. the matched route for the latency metric.
        scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
    elif b"json" not in content_type.lower() and _has_body(scope) and not _is_console_form(scope, content_type):
        return 415, "unsupported_media_type", "request bodies must be JSON: send Content-Type: application/json"
    for name, value in scope["headers"]:
        if name == b"content-length" and _declared_over(value, body_bytes_max):
            return too_large(body_bytes_max)
    return None


def _declared_over(value: bytes, bytes_max: int) -> bool:
    """A Content-Length over the bound. One that is not digits is the HTTP server's to refuse
    (it frames the body); one too long to read is over any bound."""
    try:
        return parse_digits(value.decode("latin-1")) > bytes_max
    except InvalidNumber as error:
        return error.problem == "too_long"


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _has_body(scope: Scope) -> bool:
    """A Content-Length above 0, or any Transfer-Encoding (a chunked body has no length)."""
    return _header(scope, b"content-length") not in (None, b"0") or _header(scope, b"transfer-encoding") is not None


def error_bytes(code: str, message: str) -> bytes:
    """The standard error body, compact, for the layers below FastAPI's handlers."""
    return json.dumps({"error": code, "message": message}, separators=(",", ":")).encode()


async def respond(
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    close: bool = False,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = error_bytes(code, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(headers or []),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
