"""Serve an ASGI app on a free loopback port in a background thread, for the span of a test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from paycore.http.server import Server


@contextmanager
def serve_in_thread(app: FastAPI) -> Iterator[str]:
    server = Server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="test-server")
    thread.start()
    host, port = server.server_address
    try:
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
