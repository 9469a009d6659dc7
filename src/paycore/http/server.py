"""A uvicorn server that behaves like the standard library's ThreadingHTTPServer:
bound when constructed (so port 0 works), `serve_forever()` blocks, `shutdown()` stops it."""

from __future__ import annotations

import ipaddress
import socket
import threading

import uvicorn
from starlette.types import ASGIApp


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
        config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=5, lifespan="off")
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
