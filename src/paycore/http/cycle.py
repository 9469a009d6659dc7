"""One request's ASGI `http` cycle on paycore's HTTP/1.1 protocol (`http/protocol.py`): the
`receive` and `send` the app is called with, and the response's bytes.

Adapted from uvicorn's `RequestResponseCycle` (uvicorn/protocols/http/httptools_impl.py,
BSD-3-Clause, Copyright © 2017-present, Encode OSS Ltd.), with the same answers to the same app:
the same head (status line, the server's default headers, the app's headers lowercased and
checked, `transfer-encoding: chunked` when the app names no length, `connection: close` when
the connection ends), `HEAD` answered without its body, `Expect: 100-continue` answered on the
first `receive`, `http.disconnect` once the client is gone or the response is complete, a 500
for an app that fails before answering. What differs is what a request costs:

- **A response is one write.** The head is kept until the response's first body message and
  written with it (as a WSGI server does: no head before the first body bytes); a whole
  response is one `transport.write`, so one `send` system call, without a callback scheduled
  to join writes (uvicorn writes the head, then the body: two). A streamed response's later
  chunks are each written as they are sent; nothing is held past the `send` that made it but a
  head waiting for its body.
- **No event per request**: the body is handed over as the parser gave it (no bytearray and
  copy), and `receive` waits on a future made only when there is nothing yet to hand over,
  which a request whose body came with its head never needs.
- **The head checked once**: the app's header lines are rendered, then checked by one regular
  expression (uvicorn searches two per header).
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from paycore.http.protocol import HttpProtocol

logger = logging.getLogger("uvicorn.error")  # the server's own lines, where uvicorn wrote them


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINE: Final = {status: _status_line(status) for status in range(100, 600)}
CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
# Header lines as the app's headers render: a token name (no control character, space or
# separator), ": ", a value without a control character but tab, CRLF. One match for them all.
_HEADER_LINES: Final = re.compile(rb'(?:[^\x00-\x20\x7f()<>@,;:\[\]={}\\"]+: [^\x00-\x08\x0a-\x1f\x7f]*\r\n)*')
_FRAMING: Final = frozenset((b"content-length", b"transfer-encoding", b"connection"))
_NO_BODY_STATUSES: Final = frozenset((204, 304))
_LAST_CHUNK: Final = b"0\r\n\r\n"
_SERVER_ERROR: Final = b"Internal Server Error"
_SERVER_ERROR_HEADERS: Final = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"%d" % len(_SERVER_ERROR)),
    (b"connection", b"close"),
]


class Cycle:
    """One request and its response. `protocol` calls `deliver`, `end_body` and `disconnect`
    as the request arrives or the client goes; the app calls `receive` and `send`."""

    __slots__ = (
        "_body",
        "_chunked",
        "_handed_last",
        "_head",
        "_length_left",
        "_waiter",
        "disconnected",
        "keep_alive",
        "more_body",
        "protocol",
        "response_complete",
        "response_started",
        "scope",
        "waiting_for_100_continue",
    )

    def __init__(self, protocol: HttpProtocol, scope: dict[str, Any], keep_alive: bool, expect_100: bool) -> None:
        self.protocol = protocol
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100
        self.disconnected = False
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self._body = b""
        self._handed_last = False
        self._head: bytes | None = None
        self._chunked = False
        self._length_left: int | None = None  # a declared Content-Length, less what was sent
        self._waiter: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ the protocol's side

    def deliver(self, body: bytes) -> int:
        """A piece of the request body; returns what is now held, unread by the app."""
        self._body = self._body + body if self._body else body
        self._wake()
        return len(self._body)

    def end_body(self) -> None:
        self.more_body = False
        self._wake()

    def disconnect(self) -> None:
        """The client is gone (or refused): `receive` answers `http.disconnect`, `send` drops."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ ASGI

    async def run(self, app: Any) -> None:
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:  # as uvicorn: answered or closed, logged, never raised to the loop
            logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self._abandon()
            return
        if result is not None:
            logger.error("ASGI callable should return None, but returned '%s'.", result)
            self._abandon()
        elif not self.response_started and not self.disconnected:
            logger.error("ASGI callable returned without starting response.")
            await self._send_500()
        elif not self.response_complete and not self.disconnected:
            logger.error("ASGI callable returned without completing response.")
            self._abandon()

    async def receive(self) -> dict[str, Any]:
        protocol = self.protocol
        if self.waiting_for_100_continue:
            self.waiting_for_100_continue = False
            if not protocol.transport.is_closing():
                protocol.transport.write(CONTINUE)
        while not (self.disconnected or self.response_complete):
            protocol.resume_reading()
            if self._body or not (self.more_body or self._handed_last):
                body, self._body = self._body, b""
                self._handed_last = not self.more_body
                return {"type": "http.request", "body": body, "more_body": self.more_body}
            self._waiter = protocol.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        protocol = self.protocol
        if protocol.write_paused and not self.disconnected:
            await protocol.drained()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self.response_started = True
            self.waiting_for_100_continue = False
            self._head = self._render_head(message["status"], message.get("headers", ()))
        elif self.response_complete:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
        elif kind != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
        else:
            self._send_body(message.get("body", b""), message.get("more_body", False))

    # ------------------------------------------------------------------ the response's bytes

    def _render_head(self, status: int, headers: Any) -> bytes:
        lines: list[bytes] = []
        closes = False
        for name, value in headers:
            name = name.lower()
            if name in _FRAMING:
                closes = self._framing(name, value) or closes
            lines += (name, b": ", value, b"\r\n")
        block = b"".join(lines)
        if _HEADER_LINES.fullmatch(block) is None:
            raise RuntimeError("Invalid HTTP header name or value.")
        tail = b""
        if not self.keep_alive and not closes:
            tail = b"connection: close\r\n"
        unframed = self._length_left is None and not self._chunked
        if unframed and self.scope["method"] != "HEAD" and status not in _NO_BODY_STATUSES:
            self._chunked = True  # neither a length nor an encoding named: chunked
            tail += b"transfer-encoding: chunked\r\n"
        return b"".join((STATUS_LINE[status], self.protocol.default_head(), block, tail, b"\r\n"))

    def _framing(self, name: bytes, value: bytes) -> bool:
        """A Content-Length, Transfer-Encoding or Connection header of the app's; True for a
        `Connection: close` (the connection then ends with this response)."""
        if name == b"content-length":
            if self._length_left is None and not self._chunked:
                self._length_left = int(value)
        elif name == b"transfer-encoding":
            if value.lower() == b"chunked":
                self._length_left = None
                self._chunked = True
        elif b"close" in (token.strip() for token in value.lower().split(b",")):
            self.keep_alive = False
            return True
        return False

    def _send_body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            data = b""
            self._length_left = None
        elif self._chunked:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += _LAST_CHUNK
        else:
            data = body
            if self._length_left is not None:
                if len(body) > self._length_left:
                    raise RuntimeError("Response content longer than Content-Length")
                self._length_left -= len(body)
        if self._head is not None:
            data = self._head + data
            self._head = None
        transport = self.protocol.transport
        if data:
            transport.write(data)
        if more_body:
            return
        if self._length_left:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        self._wake()
        if not self.keep_alive:
            transport.close()
        self.protocol.response_complete()

    def _abandon(self) -> None:
        """The app failed after its response started: what was made of it is sent, then the
        connection is closed (the client cannot tell a cut response from a whole one otherwise)."""
        transport = self.protocol.transport
        if self._head is not None and not transport.is_closing():
            transport.write(self._head)
            self._head = None
        transport.close()

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _SERVER_ERROR_HEADERS})
        await self.send({"type": "http.response.body", "body": _SERVER_ERROR, "more_body": False})
