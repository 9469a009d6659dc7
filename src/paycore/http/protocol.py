"""uvicorn's httptools protocol with the HTTP limits of SPEC §13 (ADR 0013).

uvicorn bounds none of these on its httptools protocol (the fast one, kept for credits
throughput): the size of a request's head, the time to receive a request, and it answers its
own refusals (a malformed request, too many connections) in plain text. This subclass adds:

- a head (request line and headers) over `header_bytes_max` → 431 `request_header_too_large`;
- a request not received whole (head and body) within `request_receive_timeout_ms` from its
  first byte (from the connection's opening for the first request) → 408 `request_timeout`
  if nothing was answered yet, and the connection is closed (slowloris);
- keep-alive idle time `keepalive_idle_ms`;
- more than `connections_max` connections (or as many requests in flight) → 503
  `server_busy` with `Retry-After`;
- a request httptools cannot parse → 400 `invalid_http`;
each with the standard compact JSON error body, and the connection closed. And it writes a
response's head and body in one `send` (`http/coalesced.py`), where uvicorn makes two.
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import httptools
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from paycore.config import Settings
from paycore.http.coalesced import CoalescedWrites
from paycore.http.middleware import error_bytes, respond

BUSY_RETRY_AFTER_S: Final = 1
# After a refusal the client may still be sending: closing with unread bytes makes the kernel
# reset the connection, and a reset can destroy the answer before the client reads it. So the
# write side is closed first and what still arrives is read and dropped, for at most this long
# or this much (nginx's "lingering close"), then the connection is closed.
LINGER_S: Final = 1.0
LINGER_BYTES_MAX: Final = 1_048_576
_HEADER_OVERHEAD_BYTES: Final = 4  # ": " and CRLF around every header line


@dataclass(frozen=True)
class HttpLimits:
    header_bytes_max: int = 65_536
    request_receive_timeout_ms: int = 10_000
    keepalive_idle_ms: int = 5_000
    connections_max: int = 1_000

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            header_bytes_max=settings.http_header_bytes_max,
            request_receive_timeout_ms=settings.http_request_receive_timeout_ms,
            keepalive_idle_ms=settings.http_keepalive_idle_ms,
            connections_max=settings.http_connections_max,
        )


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the answer is in `_refusal`."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # An Upgrade request is answered as plain HTTP (`data_received`): what uvicorn does too
        # when no WebSocket protocol is configured, as paycore's server configures none.
        self._upgrades_plain = config.ws == "none"
        self.limit_concurrency = None  # checked here, to answer in JSON (on_headers_complete)
        self.timeout_keep_alive = self.limits.keepalive_idle_ms / 1000  # type: ignore[assignment]
        self._receive_timer: TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0
        self._refusal: tuple[int, str, str] | None = None
        self._lingering_bytes: int | None = None  # set once refused: the bytes dropped since

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Every write of this protocol and of its request cycles goes through `self.transport`;
        # flow control (`self.flow`) keeps the socket's transport for pausing reads.
        self.transport = CoalescedWrites(transport, self.loop)
        self._arm_receive_timer()  # a connection that sends nothing is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_receive_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering_bytes is not None:
            self._linger(len(data))
            return
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The callbacks answered it as plain HTTP; uvicorn would only add a warning.
            assert self._upgrades_plain, "built for ws='none' (http/server.py): no WebSocket is served"
            return
        except httptools.HttpParserError:
            status, code, message = self._refusal or (400, "invalid_http", "the request is not valid HTTP/1.1")
            self._refuse(status, code, message)
            return
        if self._in_head and self._head_bytes > self.limits.header_bytes_max:
            self._refuse_head()

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_receive_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        size = len(self.url) + sum(len(name) + len(value) + _HEADER_OVERHEAD_BYTES for name, value in self.headers)
        if size > self.limits.header_bytes_max:
            self._refusal = _head_refusal(self.limits.header_bytes_max)
            raise _Refused
        if not self._busy():
            super().on_headers_complete()
            return
        app = self.app
        self.app = _server_busy  # what uvicorn starts for this request, this once
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        # Bytes after this point belong to the next request's head. They are counted from the
        # next read on: a bound that may run one read late, never a refusal of a request
        # whose head is within it.
        self._in_head = True
        self._head_bytes = 0
        self._cancel_receive_timer()
        super().on_message_complete()

    # Limits
    def _busy(self) -> bool:
        limit = self.limits.connections_max
        return len(self.connections) > limit or len(self.tasks) >= limit

    def _arm_receive_timer(self) -> None:
        if self._receive_timer is None:
            delay_s = self.limits.request_receive_timeout_ms / 1000
            self._receive_timer = self.loop.call_later(delay_s, self._receive_timed_out)

    def _cancel_receive_timer(self) -> None:
        if self._receive_timer is not None:
            self._receive_timer.cancel()
            self._receive_timer = None

    def _receive_timed_out(self) -> None:
        self._receive_timer = None
        message = f"the request was not received within {self.limits.request_receive_timeout_ms} ms"
        self._refuse(408, "request_timeout", message)

    def _refuse_head(self) -> None:
        status, code, message = _head_refusal(self.limits.header_bytes_max)
        self._refuse(status, code, message)

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer `status` unless a response has started, then close the connection. A request
        the app is still handling is told its client is gone, and its answer is dropped."""
        self._cancel_receive_timer()
        if self.transport.is_closing() or self._lingering_bytes is not None:
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:
                self.transport.close()
                return
            cycle.disconnected = True
            cycle.message_event.set()
        body = error_bytes(code, message)
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._close_lingering()

    def _close_lingering(self) -> None:
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingering_bytes = 0
        self.flow.resume_reading()
        self.loop.call_later(LINGER_S, self._close)

    def _linger(self, received_bytes: int) -> None:
        assert self._lingering_bytes is not None
        self._lingering_bytes += received_bytes
        if self._lingering_bytes > LINGER_BYTES_MAX:
            self._close()

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


def _head_refusal(header_bytes_max: int) -> tuple[int, str, str]:
    return 431, "request_header_too_large", f"the request line and headers are limited to {header_bytes_max} bytes"


async def _server_busy(scope: Scope, receive: Receive, send: Send) -> None:
    del scope, receive
    message = "the server has too many connections open; retry shortly"
    retry_after = [(b"retry-after", str(BUSY_RETRY_AFTER_S).encode())]
    await respond(send, 503, "server_busy", message, close=True, headers=retry_after)


def protocol_class(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn builds its protocol from the class alone, so the limits ride on a subclass."""
    return type("PaycoreHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
