"""Where the sandbox's webhooks go: a sink takes the exact body bytes and the headers to send,
and returns the HTTP status received, or raises when no answer came (connection refused,
timeout). Any callable will do (tests record in memory; `paycore simulate` posts through its
own client) and is called one delivery at a time. A sink that can take several at once says
how many with a `concurrency_max` attribute; the deliverer then sends up to that many (and up
to `SandboxSettings.webhook_concurrency_max`) at once.

`http_sink(url)` POSTs over kept-alive connections (`sink_connection.py`: the request written in
one send, the answer parsed by httptools): a pool of at most `connections_max` per sink (one
sink per destination), each connection reused for the next delivery once an answer has been
read whole. A connection idle for more than
`WEBHOOK_CONNECTION_IDLE_MS_MAX` is closed rather than reused; one that the receiver closed
while it sat idle (the send fails at once, before any answer) is replaced by a new one and the
delivery sent on it, once, as every HTTP client's pool does. The receiver may then get that
event twice, which webhooks already allow (at least once, deduped on the event id); the
deliverer records one attempt. A new connection that fails is a failed attempt, as before.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Final

from paycore_sandbox.limits import (
    WEBHOOK_CONNECTION_IDLE_MS_MAX,
    WEBHOOK_CONNECTIONS_MAX,
    SandboxSettings,
)
from paycore_sandbox.sink_connection import SinkConnection

WebhookSink = Callable[[bytes, dict[str, str]], int]

# What a kept-alive connection the receiver had closed fails with, before any answer: the
# delivery is sent once more on a new connection.
_CLOSED_WHILE_IDLE: Final = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
# What http.client refuses in a request's path, and in a header (a line break: a header could
# be smuggled in).
_URL_REFUSED: Final = re.compile("[\x00-\x20\x7f]")
_HEADER_REFUSED: Final = re.compile("[\r\n\x00]")


def sink_concurrency(sink: WebhookSink) -> int:
    """How many deliveries `sink` takes at once: its `concurrency_max`, else one."""
    concurrency = getattr(sink, "concurrency_max", 1)
    assert type(concurrency) is int and concurrency >= 1, concurrency
    return concurrency


def http_sink(
    url: str,
    timeout_ms: int = SandboxSettings.webhook_timeout_ms,
    connections_max: int = WEBHOOK_CONNECTIONS_MAX,
) -> HttpSink:
    """A sink that POSTs to `url` (http or https), bounded by `timeout_ms` for the connection
    and for each read, over at most `connections_max` kept-alive connections."""
    return HttpSink(url, timeout_ms, connections_max)


class HttpSink:
    def __init__(self, url: str, timeout_ms: int, connections_max: int) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"webhook url must be http(s)://host[:port]/path, got {url!r}")
        assert timeout_ms >= 1 and connections_max >= 1
        self._tls = _tls_context() if parts.scheme == "https" else None
        self._host = parts.hostname
        self._port = parts.port
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._head = _request_head(path, _host_header(parts.hostname, parts.port, https=self._tls is not None))
        self._timeout_s = timeout_ms / 1000
        self.concurrency_max = connections_max
        self._slots = threading.BoundedSemaphore(connections_max)
        self._lock = threading.Lock()  # guards _idle
        self._idle: list[tuple[SinkConnection, float]] = []  # (connection, idle since), newest last

    def __call__(self, body: bytes, headers: dict[str, str]) -> int:
        if not self._slots.acquire(timeout=self._timeout_s):
            raise TimeoutError(f"no webhook connection of {self.concurrency_max} became free in time")
        try:
            return self._post(self._head(body, headers), body)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections (those in use are closed when their delivery ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def _post(self, head: bytes, body: bytes) -> int:
        connection, reused = self._take()
        try:
            return self._exchange(connection, head, body)
        except _CLOSED_WHILE_IDLE:
            connection.close()
            if not reused:
                raise
        except BaseException:
            connection.close()
            raise
        connection = self._connection()
        try:
            return self._exchange(connection, head, body)
        except BaseException:
            connection.close()
            raise

    def _exchange(self, connection: SinkConnection, head: bytes, body: bytes) -> int:
        """POST once and read the answer; the connection goes back to the pool if it can
        carry another request, else it is closed."""
        status, reusable = connection.post(head, body)
        if reusable:
            with self._lock:
                self._idle.append((connection, time.monotonic()))
        else:
            connection.close()
        return status

    def _take(self) -> tuple[SinkConnection, bool]:
        """The most recently used idle connection and True, or a new one and False; idle
        connections past their time are closed on the way (older ones wait for a later take)."""
        stale: list[SinkConnection] = []
        taken: SinkConnection | None = None
        oldest_s = time.monotonic() - WEBHOOK_CONNECTION_IDLE_MS_MAX / 1000
        with self._lock:
            while self._idle and taken is None:
                connection, idle_since_s = self._idle.pop()
                if idle_since_s >= oldest_s:
                    taken = connection
                else:
                    stale.append(connection)
        for connection in stale:
            connection.close()
        return (taken, True) if taken is not None else (self._connection(), False)

    def _connection(self) -> SinkConnection:
        # Not connected yet: it connects on its first request, within the timeout.
        return SinkConnection(self._host, self._port, self._tls, self._timeout_s)


def _tls_context() -> ssl.SSLContext:
    """What `http.client.HTTPSConnection` uses by default: the system's verified context,
    HTTP/1.1 offered by ALPN."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


def _host_header(host: str, port: int | None, *, https: bool) -> str:
    """The `Host` header as `http.client` writes it: the port only when not the scheme's own,
    an IPv6 address in brackets, a non-ASCII name in IDNA."""
    try:
        name = host.encode("ascii").decode()
    except UnicodeEncodeError:
        name = host.encode("idna").decode()
    if ":" in name:
        name = f"[{name}]"
    return name if port is None or port == (443 if https else 80) else f"{name}:{port}"


def _request_head(path: str, host: str) -> Callable[[bytes, dict[str, str]], bytes]:
    """A function of (body, headers) giving the request line and headers, blank line included,
    in `http.client`'s order: Host, Accept-Encoding, Content-Length, then the caller's. A path
    `http.client` would refuse is refused as it did: by each request, `InvalidURL`."""
    start = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: identity\r\n"
    refused = _URL_REFUSED.search(path) or not path.isascii()

    def head(body: bytes, headers: dict[str, str]) -> bytes:
        if refused:
            raise http.client.InvalidURL(f"URL can't contain control characters or non-ASCII. {path!r}")
        lines = [start, f"Content-Length: {len(body)}\r\n"]
        for name, value in headers.items():
            if _HEADER_REFUSED.search(name) or _HEADER_REFUSED.search(value):
                raise ValueError(f"invalid header {name!r}: {value!r}")
            lines.append(f"{name}: {value}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    return head
