"""Who may reach this server (SPEC §3.2, ADR 0013): the start-up safety rules in one place.

Two states are unsafe off loopback: local mode (no API key exists yet, so requests are
accepted without authentication) and the public default webhook secret (anyone could forge a
processor webhook). Every entry point checks the bind address before binding
(`check_bind`, called by `Server` and `paycore serve`), and the app itself checks the local
address each request arrived on (`ExposureGuard`), because under an external ASGI server
(`uvicorn app:app --host 0.0.0.0`) the app never learns the bind address.

The sandbox processor served on its own (`paycore processor serve`) has one rule: off loopback
only with an admin token, which its fault plan's endpoints then require (`check_admin_bind`,
called by `Server` and by the command before the sandbox starts).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import time
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from paycore.config import DEV_WEBHOOK_SECRET
from paycore.db.availability import DatabaseUnavailable
from paycore.http.context import AuthState
from paycore.http.errors import RETRY_AFTER_UNAVAILABLE_S
from paycore.http.middleware import respond

log = logging.getLogger(__name__)

WEBHOOK_PATH: Final = "/v1/webhooks/processor"
SANDBOX_PREFIX: Final = "/sandbox"
# Answered on any address in any mode: they say only that the process is up.
_ALWAYS_ANSWERED: Final = frozenset({"/healthz", "/readyz"})
_ASK_THE_DATABASE: Final = "ask the database"  # whether local mode is still in force
_REFUSAL_LOG_INTERVAL_S: Final = 60.0  # one error line per reason per minute, not one per request


class UnsafeBind(Exception):
    """Binding this address in this state would expose the API; `reason` is a stable word."""

    def __init__(self, host: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.host = host
        self.reason = reason
        self.message = message


@functools.lru_cache(maxsize=64)
def is_loopback(host: str | None) -> bool:
    """True only for an address that cannot be reached from another machine: `localhost`,
    127.0.0.0/8, ::1 (also bracketed, or IPv4-mapped). `0.0.0.0`, `::`, `""` (all
    interfaces), any other address and any other hostname are not loopback: a hostname is not
    resolved, because what it resolves to can change after the check."""
    if host is None:
        return False
    if host == "localhost":
        return True
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@functools.lru_cache(maxsize=64)
def arrived_off_loopback(local_host: str) -> bool:
    """For the host of ASGI's `scope["server"]` (the local address a connection arrived on):
    True for an IP address that is not loopback. Anything else is not a network address (a
    unix socket's path, `(path, None)` in uvicorn; an in-process test client's name): local."""
    try:
        ipaddress.ip_address(local_host)
    except ValueError:
        return False
    return not is_loopback(local_host)


def check_bind(host: str, *, local_mode: bool, webhook_secret: str) -> None:
    """Raise `UnsafeBind` (and log `start_refused`) when binding `host` would be unsafe."""
    if is_loopback(host):
        return
    if local_mode:
        _refuse_start(
            host,
            "local_mode",
            f"refusing to bind {host}: no API key exists yet (local mode accepts requests without "
            "authentication). Create one with `paycore tenants create NAME`, or bind 127.0.0.1.",
        )
    if webhook_secret == DEV_WEBHOOK_SECRET:
        _refuse_start(
            host,
            "default_webhook_secret",
            f"refusing to bind {host}: PAYCORE_PROCESSOR_WEBHOOK_SECRET is the public development default, "
            "so anyone could forge processor webhooks. Set it to your processor's signing secret.",
        )


def check_admin_bind(host: str, *, admin_token: str | None) -> None:
    """Raise `UnsafeBind` (and log `start_refused`) when `host` is not loopback and there is no
    admin token: the sandbox processor's fault plan decides what it answers (a charge that
    "succeeds", a report that lies), so off loopback only a holder of the token may set it."""
    if is_loopback(host) or admin_token:
        return
    _refuse_start(
        host,
        "no_admin_token",
        f"refusing to bind {host}: without an admin token anyone who reaches the sandbox processor could "
        "change what it answers (its fault plan). Set --admin-token or PAYCORE_SANDBOX_ADMIN_TOKEN, "
        "or bind 127.0.0.1.",
    )


def _refuse_start(host: str, reason: str, message: str) -> None:
    log.error(message, extra={"event": "start_refused", "host": host, "reason": reason})
    raise UnsafeBind(host, reason, message)


class ExposureGuard:
    """Pure ASGI middleware: refuse, with 403 `unsafe_exposure`, a request that arrived on a
    non-loopback local address (`scope["server"]`) while serving it would be unsafe:
    anything but /healthz and /readyz in local mode, the processor webhook while its secret
    is the public default, and the sandbox's own API (`/sandbox`, mounted by `serve --dev`)
    always. A unix socket is local. Loopback traffic costs one cached lookup."""

    def __init__(self, app: ASGIApp, auth: AuthState, webhook_secret: str) -> None:
        self.app = app
        self.auth = auth
        self.default_secret = webhook_secret == DEV_WEBHOOK_SECRET
        self._logged_at: dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if scope["type"] != "http" or server is None or not arrived_off_loopback(server[0]):
            await self.app(scope, receive, send)
            return
        try:
            reason = await self._refusal(scope["path"], scope["method"])
        except DatabaseUnavailable:
            # Whether a key exists yet is a database question: without an answer, neither
            # refuse nor serve (this layer is outside the app's error handlers).
            retry_after = (b"retry-after", str(RETRY_AFTER_UNAVAILABLE_S).encode())
            message = "the database is unavailable; nothing was done: retry shortly"
            await respond(send, 503, "database_unavailable", message, headers=[retry_after])
            return
        if reason is None:
            await self.app(scope, receive, send)
            return
        self._log(reason, server[0], scope["path"])
        await respond(send, 403, "unsafe_exposure", _MESSAGES[reason])

    def serves(self, scope: Scope) -> bool:
        """True when this request is served without a refusal, known without the database: it
        arrived on loopback, or no rule refuses it and a key exists (cached for good once one
        does). For `http/lean.py`, which hands any other request to this guard."""
        server = scope.get("server")
        if server is None or not arrived_off_loopback(server[0]):
            return True
        return self._refusal_known(scope["path"], scope["method"]) is None

    async def _refusal(self, path: str, method: str) -> str | None:
        known = self._refusal_known(path, method)
        if known is not _ASK_THE_DATABASE:
            return known
        if not await self._auth_required():
            return "local_mode"
        return None

    def _refusal_known(self, path: str, method: str) -> str | None:
        """The refusal's reason, None for none, or `_ASK_THE_DATABASE` whether a key exists yet."""
        if path == SANDBOX_PREFIX or path.startswith(SANDBOX_PREFIX + "/"):
            return "sandbox"
        if path in _ALWAYS_ANSWERED:
            return None
        if self.default_secret and path == WEBHOOK_PATH and method == "POST":
            return "default_webhook_secret"
        if self.auth.auth_required:  # cached for good once a key exists
            return None
        return _ASK_THE_DATABASE

    async def _auth_required(self) -> bool:
        if self.auth.auth_required:  # cached for good once a key exists
            return True
        if self.auth.database.is_postgres:
            return await self.auth.is_auth_required_on_loop()  # the loop's connection, no thread
        return self.auth.is_auth_required()  # a SQLite WAL read of microseconds

    def _log(self, reason: str, address: str, path: str) -> None:
        now = time.monotonic()
        if now - self._logged_at.get(reason, -_REFUSAL_LOG_INTERVAL_S) < _REFUSAL_LOG_INTERVAL_S:
            return
        self._logged_at[reason] = now
        log.error(
            "refused a request that arrived on a non-loopback address",
            extra={"event": "request_refused", "reason": reason, "local_address": address, "path": path},
        )


_MESSAGES: Final = {
    "local_mode": (
        "this server is in local mode (no API key exists yet) and answers only on a loopback address; "
        "create an API key with `paycore tenants create NAME`"
    ),
    "default_webhook_secret": (
        "processor webhooks signed with the public development secret are accepted only on a loopback "
        "address; set PAYCORE_PROCESSOR_WEBHOOK_SECRET"
    ),
    "sandbox": "the sandbox API is served only on a loopback address",
}
