"""A uvicorn server that behaves like the standard library's ThreadingHTTPServer:
bound when constructed (so port 0 works), `serve_forever()` blocks, `shutdown()` stops it."""

from __future__ import annotations

import gc
import ipaddress
import socket
import threading

import uvicorn
from starlette.types import ASGIApp

# The cyclic garbage collector's thresholds for a serving process (ADR 0012): Python's
# default (700 allocations) runs a young collection every few requests; a credit allocates
# thousands of short-lived objects, almost none in cycles. Measured by hand on credits over
# HTTP (wrk -c16, SQLite, alternated): 1,394, 1,563, 1,576/s with the default against 1,530,
# 1,605, 1,842/s with these (docs/benchmarks.md).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc_for_serving() -> None:
    """For a process that only serves from now on: keep what start-up made out of every
    collection (`gc.freeze`) and collect young objects less often. Cycles are still found."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    def __init__(self, app: ASGIApp, host: str, port: int, *, log_level: str = "warning") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.socket.listen(2048)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        # log_config=None: uvicorn's lines go to the root logger's handler (paycore.kit.logs), if any.
        config = uvicorn.Config(
            app, log_level=log_level, log_config=None, access_log=False, timeout_keep_alive=5, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._done = threading.Event()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        del poll_interval  # uvicorn polls should_exit on its own schedule
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._done.set()

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._done.wait()

    def server_close(self) -> None:
        self.socket.close()
