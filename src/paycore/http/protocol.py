"""paycore's HTTP/1.1 server protocol: httptools' parser, an `asyncio.Protocol`, the ASGI `http`
cycle (`http/cycle.py`) and the HTTP limits of SPEC §13 (ADR 0013).

Served by uvicorn's public server (`uvicorn.Config(http=<this class>)`, `uvicorn.Server`), which
builds it with `config`, `server_state`, `app_state` and `_loop` and, on a graceful shutdown, calls
`shutdown()` on every protocol in `server_state.connections` and waits for them and for
`server_state.tasks`. Nothing private of uvicorn's is subclassed or called. Adapted from uvicorn's
`HttpToolsProtocol` (uvicorn/protocols/http/httptools_impl.py, BSD-3-Clause, Copyright ©
2017-present, Encode OSS Ltd.): keep-alive, pipelined requests answered in order (the next one
parsed and held, reading paused, until the one before is answered), read flow control (a body
held past 64 KiB pauses reading until the app takes it), write back-pressure (`send` waits while
the transport's buffer is over its high-water mark), `Expect: 100-continue`, `HEAD`, a client gone
→ `http.disconnect`, the server's default headers (`date`, `server`) on every response. No
WebSocket is served: an Upgrade request is answered as plain HTTP.

The limits (`http/limits.py`, which lists them) are checked here, each refusal answered with the
standard compact JSON error body and the connection closed.

Leaner than uvicorn's a request: one timer a connection, re-armed lazily, instead of two timers
a request (receive and keep-alive); the path split without `parse_url` for an origin-form
target; the head's exact size summed only when the bytes read could exceed the bound; no access
log (paycore writes its own); a response in one write (`http/cycle.py`).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import deque
from typing import Any, ClassVar, Final

import httptools
from uvicorn.config import Config
from uvicorn.server import ServerState

from paycore.http.cycle import STATUS_LINE, Cycle
from paycore.http.limits import LINGER_BYTES_MAX, LINGER_S, HttpLimits, head_refusal, server_busy
from paycore.http.middleware import error_bytes

# A request body held for the app past this pauses reading until the app takes it.
BODY_HELD_BYTES_MAX: Final = 65_536
_HEADER_OVERHEAD_BYTES: Final = 4  # ": " and CRLF around every header line
_METHODS: Final = {m.encode(): m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")}


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the answer is in `_refusal`."""


# The server's default headers (`date`, `server`: uvicorn's `Server` renews the list every
# second) rendered once per list for every response of the process: (the list, its bytes),
# replaced whole, so that servers on several threads never read one's bytes for another's list.
_default_head: list[tuple[object, bytes]] = [(None, b"")]


def _address(info: Any) -> tuple[str, int | None] | None:
    """A transport's `sockname` / `peername` as ASGI names it: (host, port); (path, None) for
    a unix socket's path; None when there is none."""
    if isinstance(info, tuple | list) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    if isinstance(info, str) and info:
        return (info, None)
    return None


class HttpProtocol(asyncio.Protocol):
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.root_path: str = config.root_path
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        # uvicorn's server waits for these on a graceful stop (typed as its own protocols' set)
        self.connections: set[Any] = server_state.connections
        self.tasks = server_state.tasks
        self._task_done = server_state.tasks.discard
        self.app_state = app_state
        self.parser = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests that end with `Connection: close`, as uvicorn.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self._asgi = {"version": config.asgi_version, "spec_version": "2.3"}
        self._server: tuple[str, int | None] | None = None
        self._client: tuple[str, int | None] | None = None
        self._scheme = "http"
        self.cycle: Cycle | None = None  # the request being parsed (or the last one)
        self._active: Cycle | None = None  # the request being answered
        self._pipeline: deque[tuple[Cycle, Any]] = deque()
        self._read_paused = False
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None
        # Per request, while parsing
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self._expect_100 = False
        # Limits: one timer, at the earlier of two deadlines (loop time), re-armed lazily
        self._receive_s = self.limits.request_receive_timeout_ms / 1000
        self._idle_s = self.limits.keepalive_idle_ms / 1000
        self._receive_deadline: float | None = None
        self._idle_deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0  # read while a head is incomplete, from the read after the last request
        self._fed_bytes = 0  # fed to the parser, all told
        self._read_start = 0  # `_fed_bytes` before the read being parsed
        self._head_start = 0  # `_read_start` of the read the request began in
        self._refusal: tuple[int, str, str] | None = None
        self._lingering_bytes: int | None = None  # set once refused: the bytes dropped since

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.add(self)
        self.transport = transport  # type: ignore[assignment]  # a stream's: asyncio's or uvloop's
        self._server = _address(transport.get_extra_info("sockname"))
        self._client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext"):
            self._scheme = "https"
        self._set_receive_deadline()  # a connection that sends nothing is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for cycle in (self._active, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnect()
        self.resume_writing()
        if exc is None:
            self.transport.close()
        # What refers back to this protocol is let go (the parser, the requests), so that a
        # closed connection is freed by its reference count, not by the cyclic collector.
        self._pipeline.clear()
        self.cycle = self._active = None
        self.parser = None  # type: ignore[assignment]

    def eof_received(self) -> None:
        """The client shut its side: the transport closes (as uvicorn's)."""

    def data_received(self, data: bytes) -> None:
        if self._lingering_bytes is not None:
            self._linger(len(data))
            return
        self._idle_deadline = None
        size = len(data)
        if self._in_head:
            self._head_bytes += size
        self._read_start = self._fed_bytes
        self._fed_bytes += size
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            return  # the callbacks answer it as plain HTTP: no WebSocket is served
        except httptools.HttpParserError:
            status, code, message = self._refusal or (400, "invalid_http", "the request is not valid HTTP/1.1")
            self._refuse(status, code, message)
            return
        if self._in_head and self._head_bytes > self.limits.header_bytes_max:
            self._refuse(*head_refusal(self.limits.header_bytes_max))

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # ------------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self._expect_100 = False
        self._head_start = self._read_start
        if self._receive_deadline is None:
            self._set_receive_deadline()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_100 = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        bound = self.limits.header_bytes_max
        if self._fed_bytes - self._head_start > bound and self._head_size() > bound:
            self._refusal = head_refusal(bound)
            raise _Refused
        parser = self.parser
        method = parser.get_method()
        http_version = parser.get_http_version()
        cycle = Cycle(
            self,
            self._scope(_METHODS.get(method) or method.decode("ascii"), http_version),
            http_version != "1.0" and parser.should_keep_alive(),
            self._expect_100,
        )
        app = server_busy if self._busy() else self.app
        previous, self.cycle = self.cycle, cycle
        if previous is None or previous.response_complete:
            self._start(cycle, app)
        else:  # pipelined: answered after the one before it, and nothing more read till then
            self._pause_reading()
            self._pipeline.append((cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        assert cycle is not None
        if not cycle.response_complete and cycle.deliver(body) > BODY_HELD_BYTES_MAX:
            self._pause_reading()

    def on_message_complete(self) -> None:
        # Bytes after this point belong to the next request's head. They are counted from the
        # next read on: a bound that may run one read late, never a refusal of a request
        # whose head is within it.
        self._in_head = True
        self._head_bytes = 0
        self._receive_deadline = None
        cycle = self.cycle
        assert cycle is not None
        if not cycle.response_complete:
            cycle.end_body()

    # ------------------------------------------------------------------ requests

    def _scope(self, method: str, http_version: str) -> dict[str, Any]:
        url = self.url
        if url[:1] == b"/" and b"#" not in url:
            raw_path, _, query = url.partition(b"?")
        else:  # absolute-form, or a fragment: the parser's own reading
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        return {
            "type": "http",
            "asgi": self._asgi,
            "http_version": http_version,
            "server": self._server,
            "client": self._client,
            "scheme": self._scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
            "method": method,
            "path": self.root_path + path if self.root_path else path,
            "raw_path": self.root_path.encode("ascii") + raw_path if self.root_path else raw_path,
            "query_string": query,
        }

    def _start(self, cycle: Cycle, app: Any) -> None:
        self._active = cycle
        task = self.loop.create_task(cycle.run(app))
        task.add_done_callback(self._task_done)
        self.tasks.add(task)

    def response_complete(self) -> None:
        """Called by the answering cycle once its response is whole: the next pipelined request
        is started, or the keep-alive idle time begins."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle_deadline = None
        self.resume_reading()
        if self._pipeline:
            self._start(*self._pipeline.popleft())
        else:
            self._idle_deadline = self.loop.time() + self._idle_s
            self._arm(self._idle_deadline)

    def default_head(self) -> bytes:
        headers = self.server_state.default_headers
        rendered_for, rendered = _default_head[0]
        if rendered_for is not headers:
            rendered = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
            _default_head[0] = (headers, rendered)
        return rendered

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: an idle connection is closed now, a busy one after its
        response (`Connection: close`)."""
        cycle = self.cycle  # the last request read: those pipelined before it are answered first
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # ------------------------------------------------------------------ flow control

    def _pause_reading(self) -> None:
        if not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    async def drained(self) -> None:
        """Until the transport's buffer is back under its low-water mark (or the connection is lost)."""
        if self._drain is None or self._drain.done():
            self._drain = self.loop.create_future()
        await self._drain

    # ------------------------------------------------------------------ limits

    def _busy(self) -> bool:
        limit = self.limits.connections_max
        return len(self.connections) > limit or len(self.tasks) >= limit

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + _HEADER_OVERHEAD_BYTES for name, value in self.headers)

    def _set_receive_deadline(self) -> None:
        self._receive_deadline = self.loop.time() + self._receive_s
        self._arm(self._receive_deadline)

    def _arm(self, deadline: float) -> None:
        """The timer fires no later than `deadline` (a timer set for later is moved)."""
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = self.loop.call_at(deadline, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        now = self.loop.time()
        receive, idle = self._receive_deadline, self._idle_deadline
        if receive is not None and receive <= now:
            self._receive_deadline = None
            message = f"the request was not received within {self.limits.request_receive_timeout_ms} ms"
            self._refuse(408, "request_timeout", message)
        elif idle is not None and idle <= now:
            self._idle_deadline = None
            self._close()
        elif receive is not None or idle is not None:
            self._arm(min(deadline for deadline in (receive, idle) if deadline is not None))

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer `status` unless a response has started, then close the connection. A request
        the app is still handling is told its client is gone, and its answer is dropped."""
        self._receive_deadline = None
        if self.transport.is_closing() or self._lingering_bytes is not None:
            return
        self._pipeline.clear()
        for cycle in (self._active, self.cycle):
            if cycle is not None and not cycle.response_complete:
                if cycle.response_started:
                    self.transport.close()
                    return
                cycle.disconnect()
        body = error_bytes(code, message)
        head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        self.transport.write(STATUS_LINE[status] + self.default_head() + head + body)
        self._close_lingering()

    def _close_lingering(self) -> None:
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingering_bytes = 0
        self.resume_reading()
        self.loop.call_later(LINGER_S, self._close)

    def _linger(self, received_bytes: int) -> None:
        assert self._lingering_bytes is not None
        self._lingering_bytes += received_bytes
        if self._lingering_bytes > LINGER_BYTES_MAX:
            self._close()

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


def protocol_class(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn builds its protocol from the class alone, so the limits ride on a subclass."""
    return type("PaycoreHttpProtocol", (HttpProtocol,), {"limits": limits})
