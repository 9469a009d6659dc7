"""One kept-alive HTTP/1.1 connection of the webhook sink (`sink.HttpSink`): a POST written in
one `sendall`, its answer parsed by httptools (the C parser paycore's own server runs on).

`http.client` cost a webhook about 140 µs of CPU on the sending thread, most of it building
the request line and headers call by call and parsing the answer's headers with the `email`
package (docs/benchmarks.md, `sandbox_bench.py`); this costs about 40. What goes on the wire
is what `http.client` sent: the same request line and headers in the same order (`Host`,
`Accept-Encoding: identity`, `Content-Length`, then the caller's), and the same bounds: the
timeout for the connection and for each read, the answer's body read up to
`WEBHOOK_ANSWER_BYTES_MAX` (a longer one closes the connection). The failures are the ones
`http.client` raised, by type and message, since each failed attempt records them:
`ConnectionRefusedError`, `TimeoutError`, `RemoteDisconnected` for a connection closed before
any answer, `IncompleteRead` for one closed inside it, `BadStatusLine` for bytes that are not
an HTTP answer.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from typing import Final

import httptools

from paycore_sandbox.limits import WEBHOOK_ANSWER_BYTES_MAX

_RECEIVE_BYTES: Final = 65_536
_CONTINUE_STATUSES: Final = range(100, 200)  # interim answers (100 Continue): the final one follows
_LENGTH_HEADERS: Final = frozenset({b"content-length", b"transfer-encoding"})


class _Answer:
    """httptools' callbacks for one answer: its status once the headers are in, whether it is
    complete, how many bytes of body came, and whether anything followed it."""

    __slots__ = ("body_bytes", "complete", "delimited", "keep_alive", "parser", "status", "trailing")

    def __init__(self) -> None:
        self.status = 0  # 0 until the final answer's headers are in
        self.body_bytes = 0
        self.delimited = False  # its length is given (Content-Length, chunked), not its connection's
        self.complete = False
        self.keep_alive = False  # read as it completes: the parser forgets it once it has
        self.trailing = False  # bytes after the answer: the connection cannot be reused
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        if self.complete:
            self.trailing = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in _LENGTH_HEADERS:
            self.delimited = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status not in _CONTINUE_STATUSES:
            self.status = status

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)

    def on_message_complete(self) -> None:
        if self.status:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()


class SinkConnection:
    """A connection to one destination, opened on the first `post` (within the timeout)."""

    def __init__(self, host: str, port: int | None, tls: ssl.SSLContext | None, timeout_s: float) -> None:
        self._host = host
        self._port = port if port is not None else (443 if tls is not None else 80)
        self._tls = tls
        self._timeout_s = timeout_s
        self._socket: socket.socket | None = None

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def post(self, head: bytes, body: bytes) -> tuple[int, bool]:
        """Send `head` (the request line and headers, blank line included) and `body`; return
        the answer's status and whether the connection can carry another request."""
        connection = self._socket if self._socket is not None else self._connect()
        connection.sendall(head + body)
        answer = _Answer()
        received = False
        while not answer.complete:
            data = connection.recv(_RECEIVE_BYTES)
            if not data:
                return _ended(answer, received)
            received = True
            try:
                answer.parser.feed_data(data)
            except httptools.HttpParserError as error:
                raise http.client.BadStatusLine(f"not an HTTP answer: {error}") from error
            if answer.status and answer.body_bytes > WEBHOOK_ANSWER_BYTES_MAX:
                return answer.status, False  # the rest is not read: the connection is closed
        return answer.status, answer.keep_alive and not answer.trailing

    def _connect(self) -> socket.socket:
        connection = socket.create_connection((self._host, self._port), self._timeout_s)
        try:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                connection = self._tls.wrap_socket(connection, server_hostname=self._host)
        except BaseException:
            connection.close()
            raise
        self._socket = connection
        return connection


def _ended(answer: _Answer, received: bool) -> tuple[int, bool]:
    """The receiver closed the connection before the answer was complete: an answer whose
    length is its connection's is complete now; no answer at all is `RemoteDisconnected`
    (what a kept-alive connection closed while idle gives), part of one `IncompleteRead`."""
    if not received:
        raise http.client.RemoteDisconnected("Remote end closed connection without response")
    if answer.status and not answer.delimited:
        return answer.status, False
    raise http.client.IncompleteRead(b"")
