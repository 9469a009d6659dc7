"""Where the sandbox's webhooks go: a sink takes the exact body bytes and the headers to send,
and returns the HTTP status received, or raises when no answer came (connection refused,
timeout). Any callable will do (tests record in memory; `paycore simulate` posts through its
own client) and is called one delivery at a time. A sink that can take several at once says
how many with a `concurrency_max` attribute; the deliverer then sends up to that many (and up
to `SandboxSettings.webhook_concurrency_max`) at once.

`http_sink(url)` POSTs with the standard library over kept-alive connections: a pool of at most
`connections_max` per sink (one sink per destination), each connection reused for the next
delivery once an answer has been read whole. A connection idle for more than
`WEBHOOK_CONNECTION_IDLE_MS_MAX` is closed rather than reused; one that the receiver closed
while it sat idle (the send fails at once, before any answer) is replaced by a new one and the
delivery sent on it, once, as every HTTP client's pool does. The receiver may then get that
event twice, which webhooks already allow (at least once, deduped on the event id); the
deliverer records one attempt. A new connection that fails is a failed attempt, as before.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Final

from paycore_sandbox.limits import (
    WEBHOOK_ANSWER_BYTES_MAX,
    WEBHOOK_CONNECTION_IDLE_MS_MAX,
    WEBHOOK_CONNECTIONS_MAX,
    SandboxSettings,
)

WebhookSink = Callable[[bytes, dict[str, str]], int]

# What a kept-alive connection the receiver had closed fails with, before any answer: the
# delivery is sent once more on a new connection.
_CLOSED_WHILE_IDLE: Final = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


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
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._timeout_s = timeout_ms / 1000
        self.concurrency_max = connections_max
        self._slots = threading.BoundedSemaphore(connections_max)
        self._lock = threading.Lock()  # guards _idle
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # (connection, idle since), newest last

    def __call__(self, body: bytes, headers: dict[str, str]) -> int:
        if not self._slots.acquire(timeout=self._timeout_s):
            raise TimeoutError(f"no webhook connection of {self.concurrency_max} became free in time")
        try:
            return self._post(body, headers)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections (those in use are closed when their delivery ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def _post(self, body: bytes, headers: dict[str, str]) -> int:
        connection, reused = self._take()
        try:
            return self._exchange(connection, body, headers)
        except _CLOSED_WHILE_IDLE:
            connection.close()
            if not reused:
                raise
        except BaseException:
            connection.close()
            raise
        connection = self._connection()
        try:
            return self._exchange(connection, body, headers)
        except BaseException:
            connection.close()
            raise

    def _exchange(self, connection: http.client.HTTPConnection, body: bytes, headers: dict[str, str]) -> int:
        """POST once and read the answer; the connection goes back to the pool if it can
        carry another request, else it is closed."""
        connection.request("POST", self._path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(WEBHOOK_ANSWER_BYTES_MAX + 1)  # bounded: the answer's body is not used
        if response.isclosed() and not response.will_close:
            with self._lock:
                self._idle.append((connection, time.monotonic()))
        else:
            connection.close()
        return int(response.status)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """The most recently used idle connection and True, or a new one and False; idle
        connections past their time are closed on the way (older ones wait for a later take)."""
        stale: list[http.client.HTTPConnection] = []
        taken: http.client.HTTPConnection | None = None
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

    def _connection(self) -> http.client.HTTPConnection:
        # Not connected yet: http.client connects on the first request, within the timeout.
        connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return connection_class(self._host, self._port, timeout=self._timeout_s)
