"""A tenant's webhook endpoint for tests: a real HTTP server on a free loopback port, whose
answers a test programs, and which records every request it got.

    with Receiver() as receiver:
        receiver.answer("timeout", "close")  # the next two requests, then `receiver.default`
        ... deliver to receiver.url ...
        delivered = receiver.wait_for(1)

Modes: "ok" (200 `{"received":true}`), "error_500", "timeout" (answers 200 after `hang_s`, once
the client has given up), "close" (closes the connection without an answer), "slow_ok" (200
after `slow_s`), "redirect" (302 to another path of the receiver: a client that follows it
shows up as a second request), "large_ok" (200 with `large_bytes` bytes of body),
"dribble_headers" / "dribble_body" (a byte every `dribble_s`, for `hang_s`, in the headers or
the body of a 200). The server is standard library only, so it behaves like any tenant's;
with a TLS context it serves https.

By default every answer closes its connection. `Receiver(keep_alive=True)` keeps it open for
the next request (HTTP/1.1), and closes one left idle for `idle_s`, as servers do; either way
`connections` counts the TCP connections it accepted and `in_flight_max` the most requests it
was answering at once.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import socket
import ssl
import threading
import time
from collections import deque
from types import TracebackType
from typing import Any, Final

MODES: Final = frozenset(
    {"ok", "error_500", "timeout", "close", "slow_ok", "redirect", "large_ok", "dribble_headers", "dribble_body"}
)
DELIVERING_MODES: Final = frozenset({"ok", "slow_ok", "large_ok"})  # answered 200, on time
BODY_BYTES_MAX: Final = 1_048_576
OK_BODY: Final = b'{"received":true}'


@dataclasses.dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    started_s: float  # time.time() when the request arrived
    finished_s: float | None  # when the answer was sent; None while hanging, or when closed unanswered
    mode: str


class Receiver:
    """`tls`: a server context, to serve https (the handshake happens in the accepting thread)."""

    def __init__(self, tls: ssl.SSLContext | None = None, *, keep_alive: bool = False, idle_s: float = 5.0) -> None:
        self.keep_alive = keep_alive
        self.idle_s = idle_s
        self.connections = 0
        self.in_flight_max = 0
        self._in_flight = 0
        self.default = "ok"
        self.hang_s = 5.0
        self.slow_s = 0.5
        self.dribble_s = 0.1
        self.large_bytes = 100_000
        self.received: list[Received] = []
        self._queued: deque[str] = deque()
        self._changed = threading.Condition()  # guards received and _queued; notified on each answer
        self._closing = threading.Event()  # ends every wait of a handler at once
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=functools.partial(self._server.serve_forever, poll_interval=0.05),
            daemon=True,
            name="webhook-receiver",
        )
        port = self._server.server_address[1]
        self.port = port
        self.url = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}/hook"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def answer(self, *modes: str) -> None:
        """The modes of the next requests, in order; `default` afterwards."""
        assert all(mode in MODES for mode in modes), modes
        with self._changed:
            self._queued.extend(modes)

    def delivered(self) -> list[Received]:
        """The requests answered 200 in a delivering mode (not a 200 sent after the client gave up)."""
        with self._changed:
            return [found for found in self.received if _was_delivered(found)]

    def wait_for(self, count: int, timeout_s: float = 10) -> list[Received]:
        """At least `count` delivered requests, waiting up to `timeout_s` for them."""
        with self._changed:
            if self._changed.wait_for(lambda: sum(map(_was_delivered, self.received)) >= count, timeout_s):
                return [found for found in self.received if _was_delivered(found)]
            summary = [(found.path, found.mode, found.finished_s is not None) for found in self.received]
        raise AssertionError(f"{count} deliveries expected within {timeout_s} s; received: {summary}")

    # --- called by the handler's threads -------------------------------------------------

    def _accepted(self) -> None:
        with self._changed:
            self.connections += 1

    def _arrived(self, path: str, headers: dict[str, str], body: bytes) -> Received:
        with self._changed:
            mode = self._queued.popleft() if self._queued else self.default
            assert mode in MODES, mode
            found = Received(path, headers, body, time.time(), None, mode)
            self.received.append(found)
            self._in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self._in_flight)
            return found

    def _done(self) -> None:
        with self._changed:
            self._in_flight -= 1

    def _answered(self, found: Received) -> None:
        with self._changed:
            found.finished_s = time.time()
            self._changed.notify_all()

    def _unanswered(self, found: Received) -> None:
        """The answer marked sent could not be written: the client had left."""
        with self._changed:
            found.finished_s = None
            self._changed.notify_all()

    def _pause(self, seconds: float) -> bool:
        """Wait, unless the receiver closes first: then False."""
        return not self._closing.wait(seconds)


def _was_delivered(found: Received) -> bool:
    return found.mode in DELIVERING_MODES and found.finished_s is not None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a "timeout" handler may still hang: closing does not wait for it
    receiver: Receiver

    def process_request(self, request: Any, client_address: Any) -> None:
        self.receiver._accepted()
        super().process_request(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    _found: Received | None = None  # the request being answered, once recorded

    def setup(self) -> None:
        super().setup()
        if self.server.receiver.keep_alive:
            # A kept-alive connection waits `idle_s` for its next request, then closes (a
            # timeout ends `handle_one_request`); the answer's headers and body go out without
            # waiting for the client's delayed ACK of the headers (two writes, Nagle's algorithm).
            self.connection.settimeout(self.server.receiver.idle_s)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)

    def do_POST(self) -> None:
        receiver = self.server.receiver
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= BODY_BYTES_MAX:
            self._send(413, b'{"error":"too_large"}')
            return
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        found = self._found = receiver._arrived(self.path, headers, body)
        try:
            self._answer(receiver, found.mode)
        except OSError:  # the client left (a timeout): nothing was answered
            receiver._unanswered(found)
        finally:
            receiver._done()

    do_GET = do_POST  # a client that followed a redirect with a GET is recorded too

    def _answer(self, receiver: Receiver, mode: str) -> None:
        """Answer in `mode` (`_send` counts a complete answer as sent)."""
        self.close_connection = True
        if mode == "close":
            return
        # Only a complete, on-time answer can leave its connection open for the next request.
        self.close_connection = not (receiver.keep_alive and mode in DELIVERING_MODES)
        if mode == "timeout" and not receiver._pause(receiver.hang_s):
            return
        if mode == "slow_ok" and not receiver._pause(receiver.slow_s):
            return
        if mode in ("dribble_headers", "dribble_body"):
            self._dribble(receiver, in_headers=mode == "dribble_headers")
            return
        if mode == "error_500":
            self._send(500, b'{"error":"internal"}')
        elif mode == "redirect":
            self._send(302, b"", location="/moved")
        elif mode == "large_ok":
            self._send(200, b"x" * receiver.large_bytes)
        else:
            self._send(200, OK_BODY)

    def _send(self, status: int, body: bytes, location: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if location is not None:
            self.send_header("Location", location)
        # Counted as answered before its bytes go out (the headers wait in a buffer until
        # end_headers): the client cannot have the answer before the receiver counts it, so a
        # test that reads `delivered()` as soon as paycore got its 200 sees it. A write that
        # fails undoes it (do_POST).
        if self._found is not None:
            self.server.receiver._answered(self._found)
        self.end_headers()
        self.wfile.write(body)

    def _dribble(self, receiver: Receiver, *, in_headers: bool) -> None:
        """A 200 whose headers (or body) come a byte every `dribble_s`, for `hang_s`."""
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        if not in_headers:
            self.wfile.write(b"Content-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n")
        self.wfile.flush()
        deadline = time.monotonic() + receiver.hang_s
        while time.monotonic() < deadline:
            if not receiver._pause(receiver.dribble_s):
                return
            self.wfile.write(b"x" if not in_headers else b"X")
            self.wfile.flush()
        # never a complete answer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a test's output is its own."""
