"""One delivery attempt: POST a signed event to a tenant's endpoint, once, and say what came back.

The endpoint is the tenant's, so everything about it is untrusted: where it points, how long it
takes, what it answers. Hence:
- the SSRF guard (`urls.resolve`) vets every address of the host, and the connection is made to
  the first of them: the name is never looked up again, so a DNS answer that changes after the
  check (rebinding) cannot redirect the request. Over TLS the certificate is still verified
  against the URL's host name, not the address;
- `timeout_ms` bounds the connection and each wait for bytes, and the whole exchange is bounded
  by `EXCHANGE_TIMEOUTS_MAX` timeouts, so a server that dribbles a byte at a time cannot hold a
  worker (the DNS look-up itself is bounded by the system resolver's own settings);
- redirects are never followed (a 3xx is an answer like any other), and at most
  `excerpt_bytes_max` bytes of the body are read, then the connection is closed;
- nothing raises: every outcome is an `Answer`, whose `error` is None when a status line and
  headers were received (whatever the status), else one of `ERROR_KINDS`;
- the body and the headers carry the signature: they are never logged, and never put in an
  error message (`excerpt` holds the answer's body, or for an error the error's description).
"""

from __future__ import annotations

import dataclasses
import functools
import http.client
import io
import socket
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, cast

from paycore.webhooks import urls
from paycore.webhooks.errors import Unsafe

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

EXCHANGE_TIMEOUTS_MAX: Final = 2  # the whole exchange, connection to last byte, in timeouts
ERROR_DESCRIPTION_LENGTH_MAX: Final = 300
USER_AGENT: Final = "paycore-webhooks/1"
ERROR_KINDS: Final = frozenset(
    {
        "invalid_url",  # not an absolute http(s) URL, or http but to a loopback receiver in local mode
        "invalid_header",  # a header the caller gave cannot be sent
        "unsafe_address",  # the SSRF guard refused the host (or it does not resolve): nothing was sent
        "connection_refused",
        "connection_closed",  # the server closed (or reset) the connection before answering
        "connection_error",  # another network error: unreachable, ...
        "timeout",
        "tls_error",  # no TLS session: handshake failed, certificate refused
        "bad_response",  # the answer is not HTTP/1.x: bad status line, too many or too long headers
        # Not the network's: the endpoint's signing secret does not open with PAYCORE_SECRETS_KEY
        # (ADR 0018), so nothing was sent (set by the delivery job, webhooks.rounds).
        "secret_unreadable",
    }
)
_RESERVED_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@dataclasses.dataclass(frozen=True)
class Answer:
    status_code: int | None
    latency_ms: int
    error: str | None
    excerpt: str

    def __post_init__(self) -> None:
        assert (self.error is None) != (self.status_code is None), self
        assert self.error is None or self.error in ERROR_KINDS, self.error
        assert self.latency_ms >= 0


@dataclasses.dataclass(frozen=True)
class _Target:
    https: bool
    host: str  # as in the URL, without brackets: the Host header and the certificate's name
    port: int
    path: str  # path and query, what the request line carries


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_ms: int,
    local_mode: bool,
    excerpt_bytes_max: int = 1024,
) -> Answer:
    """POST `body` to `url` once; never raises for anything the endpoint or the network does."""
    assert timeout_ms >= 1 and excerpt_bytes_max >= 0
    assert not any(name.lower() in _RESERVED_HEADERS for name in headers), "paycore sets these itself"
    started_ns = time.monotonic_ns()
    target = _target(url)
    if target is None:
        return _failed(started_ns, "invalid_url", "not an absolute http(s) URL with a host")
    try:
        addresses = urls.resolve(target.host, target.port, local_mode=local_mode)
    except Unsafe as error:
        return _failed(started_ns, "unsafe_address", str(error))
    if not (target.https or (local_mode and all(urls.is_loopback_address(address) for address in addresses))):
        return _failed(started_ns, "invalid_url", "http is allowed in local mode only, to a loopback receiver")
    timeout_s = timeout_ms / 1000
    deadline_ns = time.monotonic_ns() + timeout_ms * 1_000_000 * EXCHANGE_TIMEOUTS_MAX
    connection = _connection(target, addresses[0], timeout_s)
    try:
        _send(connection, target, body, headers, timeout_s, deadline_ns)
    except (OSError, http.client.HTTPException, ValueError) as error:
        connection.close()
        return _failed(started_ns, *_classified(error))
    try:
        return _received(connection, started_ns, timeout_s, deadline_ns, excerpt_bytes_max)
    finally:
        connection.close()


def _target(url: str) -> _Target | None:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    https = parts.scheme == "https"
    if port is None:
        port = 443 if https else 80
    if not 1 <= port <= 65535:
        return None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return _Target(https=https, host=parts.hostname, port=port, path=path)


def _failed(started_ns: int, kind: str, description: str) -> Answer:
    return Answer(None, _elapsed_ms(started_ns), kind, description[:ERROR_DESCRIPTION_LENGTH_MAX])


def _elapsed_ms(started_ns: int) -> int:
    return (time.monotonic_ns() - started_ns) // 1_000_000


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One context for every delivery: loading the system's CA certificates takes milliseconds.
    It verifies the certificate and the host name (an SSLContext is safe to share across threads)."""
    return ssl.create_default_context()


class _PinnedHttpsConnection(http.client.HTTPSConnection):
    """Connects to a vetted address, and verifies the certificate against the URL's host name."""

    def __init__(self, address: str, port: int, server_hostname: str, timeout_s: float) -> None:
        super().__init__(address, port, timeout=timeout_s, context=_tls_context())
        self._server_hostname = server_hostname

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        try:
            self.sock = _tls_context().wrap_socket(sock, server_hostname=self._server_hostname)
        except BaseException:
            sock.close()
            raise


def _connection(target: _Target, address: str, timeout_s: float) -> http.client.HTTPConnection:
    """A connection to `address` (an IP: the plain connection's own connect() then never looks a
    name up), not yet open."""
    if target.https:
        return _PinnedHttpsConnection(address, target.port, target.host, timeout_s)
    return http.client.HTTPConnection(address, target.port, timeout=timeout_s)


def _send(
    connection: http.client.HTTPConnection,
    target: _Target,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
    deadline_ns: int,
) -> None:
    connection.connect()
    assert connection.sock is not None
    connection.sock.settimeout(_wait_s(timeout_s, deadline_ns))
    default_port = 443 if target.https else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    defaults = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    given = {name.lower() for name in headers}
    all_headers = {
        "Host": host if target.port == default_port else f"{host}:{target.port}",
        "Connection": "close",
        **{name: value for name, value in defaults.items() if name.lower() not in given},
        **headers,
    }
    connection.request("POST", target.path, body=body, headers=all_headers)


def _wait_s(timeout_s: float, deadline_ns: int) -> float:
    """How long the next wait may take: one timeout, and never past the deadline."""
    remaining_s = (deadline_ns - time.monotonic_ns()) / 1e9
    if remaining_s <= 0:
        raise TimeoutError("the exchange took longer than its bound")
    return min(timeout_s, remaining_s)


class _DeadlineReader(io.RawIOBase):
    """The answer's bytes off the socket, each wait bounded by the timeout, all of them by the
    deadline: the socket's own timeout restarts with every byte received."""

    def __init__(self, sock: socket.socket, timeout_s: float, deadline_ns: int) -> None:
        super().__init__()
        self._sock = sock
        self._timeout_s = timeout_s
        self._deadline_ns = deadline_ns

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        self._sock.settimeout(_wait_s(self._timeout_s, self._deadline_ns))
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What http.client.HTTPResponse asks of a socket (makefile), reading through _DeadlineReader."""

    def __init__(self, sock: socket.socket, timeout_s: float, deadline_ns: int) -> None:
        self._reader = _DeadlineReader(sock, timeout_s, deadline_ns)

    def makefile(self, mode: str) -> io.BufferedReader:
        assert mode == "rb"
        return io.BufferedReader(self._reader)


def _received(
    connection: http.client.HTTPConnection, started_ns: int, timeout_s: float, deadline_ns: int, excerpt_bytes_max: int
) -> Answer:
    """The answer: its status, then at most `excerpt_bytes_max` bytes of its body. Once the status
    is in, the answer was received: a body cut short or too slow only shortens the excerpt."""
    assert connection.sock is not None
    sock = cast(socket.socket, _DeadlineSocket(connection.sock, timeout_s, deadline_ns))
    response = http.client.HTTPResponse(sock, method="POST")
    try:
        response.begin()  # the status line and headers: http.client raises only these two families
    except (OSError, http.client.HTTPException) as error:
        response.close()
        return _failed(started_ns, *_classified(error))
    try:
        excerpt = _excerpt(response, excerpt_bytes_max)
    finally:
        response.close()
    return Answer(response.status, _elapsed_ms(started_ns), None, excerpt.decode("utf-8", errors="replace"))


def _excerpt(response: http.client.HTTPResponse, excerpt_bytes_max: int) -> bytes:
    if excerpt_bytes_max == 0:
        return b""
    try:
        return response.read(excerpt_bytes_max)
    except http.client.IncompleteRead as error:  # the server closed before the end of the body
        return error.partial[:excerpt_bytes_max]
    except (OSError, http.client.HTTPException):  # too slow, reset, bad chunks: no excerpt
        return b""


def _classified(error: Exception) -> tuple[str, str]:
    """(error kind, description). A description never holds a header's value or the URL's path
    and query (a signature, a tenant's token): only what the network or the server said."""
    if isinstance(error, TimeoutError):
        return "timeout", "no answer within the timeout"
    if isinstance(error, ConnectionRefusedError):
        return "connection_refused", str(error)
    if isinstance(error, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError):
        return "connection_closed", "the server closed the connection without answering"
    if isinstance(error, ssl.SSLError | ssl.CertificateError):
        return "tls_error", str(error)
    if isinstance(error, http.client.InvalidURL | ValueError):
        return "invalid_header", "a header or the request line cannot be sent (a forbidden character)"
    if isinstance(error, OSError):
        return "connection_error", str(error)
    return "bad_response", f"{type(error).__name__}: {error}"
