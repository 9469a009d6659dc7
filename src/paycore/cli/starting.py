"""What the serving commands (`paycore serve`, `paycore processor serve`) share about starting:
a refusal to start is a `start_refused` log line and an exit status, and a server is bound by
paycore's one `Server` (its bind rules and HTTP limits: ADR 0013)."""

from __future__ import annotations

import logging
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
        message = f"cannot bind {host}:{port}: {error.strerror or error}"
        raise refuse_start(message, reason="bind_failed", code=1) from None
