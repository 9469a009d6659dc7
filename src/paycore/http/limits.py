"""The HTTP limits of SPEC §13 (ADR 0013) that paycore's protocol (`http/protocol.py`) enforces:
their bounds, read from the settings, and the answers of the two refusals made before the app
sees a request (a head over its bound, a server with too many connections).

The limits, each answered with the standard compact JSON error body and the connection closed:

- a head (request line and headers) over `header_bytes_max` → 431 `request_header_too_large`;
- a request not received whole (head and body) within `request_receive_timeout_ms` from its
  first byte (from the connection's opening for the first request) → 408 `request_timeout`
  if nothing was answered yet, and the connection is closed (slowloris);
- keep-alive idle time `keepalive_idle_ms` (closed, no answer);
- more than `connections_max` connections (or as many requests in flight) → 503
  `server_busy` with `Retry-After`;
- a request httptools cannot parse → 400 `invalid_http`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.config import Settings
from paycore.http.middleware import respond

BUSY_RETRY_AFTER_S: Final = 1
# After a refusal the client may still be sending: closing with unread bytes makes the kernel
# reset the connection, and a reset can destroy the answer before the client reads it. So the
# write side is closed first and what still arrives is read and dropped, for at most this long
# or this much (nginx's "lingering close"), then the connection is closed.
LINGER_S: Final = 1.0
LINGER_BYTES_MAX: Final = 1_048_576


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


def head_refusal(header_bytes_max: int) -> tuple[int, str, str]:
    return 431, "request_header_too_large", f"the request line and headers are limited to {header_bytes_max} bytes"


async def server_busy(scope: Any, receive: Any, send: Any) -> None:
    del scope, receive
    message = "the server has too many connections open; retry shortly"
    retry_after = [(b"retry-after", str(BUSY_RETRY_AFTER_S).encode())]
    await respond(send, 503, "server_busy", message, close=True, headers=retry_after)
