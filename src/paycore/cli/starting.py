"""What the serving commands (`paycore serve`, `paycore processor serve`) share about starting:
a refusal to start is a `start_refused` log line and an exit status, and a server is bound by
paycore's one `Server` (its bind rules and HTTP limits: ADR 0013)."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

import typer

from paycore.config import Settings

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from paycore.http.server import Server

log = logging.getLogger(__name__)


def refuse_start(message: str, *, reason: str, code: int = 2, **fields: object) -> typer.Exit:
    """Log why this process will not start (`start_refused`); the caller raises what this returns."""
    log.error(message, extra={"event": "start_refused", "reason": reason, **fields})
    return typer.Exit(code)


def bound_server(app: ASGIApp, host: str, port: int, settings: Settings) -> Server:
    """`Server(app, host, port)`, bound. An address in use or not this machine's is exit status 1
    with a message (as `uvicorn.run` did); an unsafe bind raises `UnsafeBind` (checked first by
    each command, exit status 2)."""
    from paycore.http.server import Server  # the web stack: only for the commands that serve

    try:
        return Server(app, host, port, settings=settings)
    except OSError as error:
        raise bind_refused(host, port, error) from None


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port) for `paycore serve --workers N`'s children, refused
    as `bound_server` refuses. The bind rules are the caller's to check first."""
    from paycore.http.server import listening_socket

    try:
        return listening_socket(host, port)
    except OSError as error:
        raise bind_refused(host, port, error) from None


def bind_refused(host: str, port: int, error: OSError) -> typer.Exit:
    return refuse_start(f"cannot bind {host}:{port}: {error.strerror or error}", reason="bind_failed", code=1)
