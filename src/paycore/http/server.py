"""A uvicorn server that behaves like the standard library's ThreadingHTTPServer:
bound when constructed (so port 0 works), `serve_forever()` blocks, `shutdown()` stops it.

The one way paycore serves HTTP (`app.make_server`, `paycore serve`, and the sandbox processor's
`paycore processor serve`): it refuses an unsafe bind before binding (paycore.http.exposure),
paycore refuses to serve without the key of secrets at rest (paycore.keyring), and it applies
the HTTP limits (paycore.http.protocol)."""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

import uvicorn
from starlette.types import ASGIApp

from paycore.config import Settings
from paycore.http.context import AuthState
from paycore.http.exposure import UnsafeBind, check_admin_bind, check_bind, is_loopback
from paycore.http.limits import HttpLimits
from paycore.http.protocol import protocol_class
from paycore.keyring import KeyringSource

__all__ = [
    "Server",
    "UnsafeBind",
    "check_app_bind",
    "check_app_keyring",
    "is_loopback",
    "listening_socket",
    "tune_gc_for_serving",
    "uvicorn_config",
]

# The cyclic garbage collector's thresholds for a serving process (ADR 0012): Python's
# default (700 allocations) runs a young collection every few requests; a credit allocates
# thousands of short-lived objects, almost none in cycles. Measured by hand on credits over
# HTTP (wrk -c16, SQLite, alternated): 1,394, 1,563, 1,576/s with the default against 1,530,
# 1,605, 1,842/s with these (docs/benchmarks.md).
GC_THRESHOLDS = (50_000, 20, 100)
_UNDECLARED: Final = object()
LISTEN_BACKLOG: Final = 2048


def tune_gc_for_serving() -> None:
    """For a process that only serves from now on: keep what start-up made out of every
    collection (`gc.freeze`) and collect young objects less often. Cycles are still found."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def uvicorn_config(app: ASGIApp, settings: Settings, *, log_level: str = "warning") -> uvicorn.Config:
    """The one home of the server-side settings."""
    trusted = settings.forwarded_allow_ips
    return uvicorn.Config(
        app,
        http=protocol_class(HttpLimits.from_settings(settings)),
        ws="none",  # no WebSocket is served: an Upgrade request is answered as plain HTTP
        log_level=log_level,
        access_log=False,  # paycore writes its own access line (http/request_id.py)
        log_config=None,  # uvicorn's lines go to the root logger's handler (paycore.kit.logs), if any
        lifespan="off",
        # X-Forwarded-For/-Proto rewrite the client address and scheme: believed only from
        # the configured proxies (uvicorn's own default believes 127.0.0.1).
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
    )


def check_app_bind(app: ASGIApp, host: str) -> None:
    """The start-up rules (paycore.http.exposure) for the app being served: `check_bind` for a
    paycore app (its state says local mode and the webhook secret), `check_admin_bind` for an
    app that guards its admin endpoints with the token in `state.admin_token` (the sandbox
    processor's; None: no token). Any other app cannot be judged, so it is served on loopback
    only."""
    if is_loopback(host):
        return  # safe in any state; and the database (perhaps not migrated yet) is not read
    state: Any = getattr(app, "state", None)
    auth = getattr(state, "auth", None)
    settings = getattr(state, "settings", None)
    admin_token = getattr(state, "admin_token", _UNDECLARED)
    if isinstance(auth, AuthState) and isinstance(settings, Settings):
        check_bind(host, local_mode=not auth.is_auth_required(), webhook_secret=settings.processor_webhook_secret)
    elif admin_token is None or isinstance(admin_token, str):
        check_admin_bind(host, admin_token=admin_token)
    else:
        raise UnsafeBind(host, "unknown_app", f"refusing to bind {host}: only a paycore app is served off loopback")


def check_app_keyring(app: ASGIApp) -> None:
    """A paycore app's keyring loaded before it serves: without PAYCORE_SECRETS_KEY outside
    local mode this raises `SecretsKeyRefused` (logged `start_refused`, ADR 0018)."""
    source = getattr(getattr(app, "state", None), "keyring", None)
    if isinstance(source, KeyringSource):
        source.get()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) and listening: `port` 0 picks a free one. Raises
    OSError (address in use, not this machine's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
        listening.listen(LISTEN_BACKLOG)
    except OSError:
        listening.close()
        raise
    return listening


class Server:
    """`owned`: what the server's maker opened for it alone (`app.make_server`: its database,
    the pool and the writer thread): released once the server has stopped, by `shutdown()` (after
    the last request) or `server_close()`, whichever comes first, once."""

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        *,
        settings: Settings | None = None,
        log_level: str = "warning",
        owned: Sequence[Callable[[], None]] = (),
        listening: socket.socket | None = None,
    ) -> None:
        check_app_bind(app, host)  # before anything is bound
        check_app_keyring(app)
        if settings is None:
            settings = getattr(getattr(app, "state", None), "settings", None) or Settings()
        # `listening`: a socket bound by another process (`paycore serve --workers N`'s parent).
        self.socket = listening_socket(host, port) if listening is None else listening
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self._server = uvicorn.Server(uvicorn_config(app, settings, log_level=log_level))
        self._done = threading.Event()
        self._owned = list(owned)
        self._owned_lock = threading.Lock()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        del poll_interval  # uvicorn polls should_exit on its own schedule
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop serving, wait for `serve_forever` to return, then release what the server owns."""
        self._server.should_exit = True
        self._done.wait()
        self._release()

    def server_close(self) -> None:
        self.socket.close()
        self._release()

    def _release(self) -> None:
        with self._owned_lock:
            owned, self._owned = self._owned, []
        for release in owned:
            release()
