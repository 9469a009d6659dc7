"""One API process of `paycore serve --workers N` (ADR 0028), started by `paycore.cli.supervisor`
as `python -m paycore.cli.api_process --listen-fd=FD --watch-fd=FD --index=I --host=H --port=P`.

A full API, as `paycore serve` without `--dev` is: its own settings, database engine and pool
(or SQLite writer), keyring and processor transport, all made here, in this interpreter; what
coordinates it with its siblings is the database alone (ADR 0004: the idempotency key claimed in
the transaction of the effect; BEGIN IMMEDIATE and the busy timeout on SQLite, row locks and
unique constraints on PostgreSQL). It serves on the socket its parent bound, and stops, as on
SIGTERM, when the parent is gone (the pipe at `--watch-fd` reads end-of-file)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

import typer

from paycore.config import Settings, log_options_from_env
from paycore.kit import logs

if TYPE_CHECKING:
    from paycore.http.server import Server

log = logging.getLogger("paycore.cli.api_process")  # also when run as __main__


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="paycore.cli.api_process")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    return parser.parse_args(argv)


def serve(arguments: argparse.Namespace) -> None:
    """Build this process's app on its own database and serve until SIGTERM or the parent goes."""
    from paycore.cli.main import _http_processor
    from paycore.cli.secrets_commands import keyring_or_exit
    from paycore.db.engine import Database
    from paycore.http.app import create_app
    from paycore.http.server import Server, tune_gc_for_serving
    from paycore.operators import service as operators

    settings = Settings.from_env()
    database = Database(settings)  # opened here, after the exec: nothing of the parent's is shared
    try:
        with database.read() as connection:
            local_mode = operators.local_mode(connection)
        keyring = keyring_or_exit(settings, local_mode=lambda: local_mode)
        app = create_app(settings, database, _http_processor(settings), keyring)
        listening = socket.socket(fileno=arguments.listen_fd)
        server = Server(app, arguments.host, arguments.port, settings=settings, listening=listening)
        _watch_parent(arguments.watch_fd, server)
        log.info(
            "API process %d serving on http://%s:%d",
            arguments.index,
            arguments.host,
            arguments.port,
            extra={"event": "api_process_started", "index": arguments.index, "pid": os.getpid()},
        )
        tune_gc_for_serving()
        server.serve_forever()
    finally:
        database.dispose()


def _watch_parent(watch_fd: int, server: Server) -> None:
    """Stop serving (requests in flight finish) once the parent's end of the pipe is closed:
    the parent never writes, so a read returns only at its exit, whatever killed it."""

    def watch() -> None:
        while os.read(watch_fd, 1):
            pass
        log.warning("the parent paycore serve is gone: stopping", extra={"event": "api_process_orphaned"})
        server.shutdown()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _exit_0(signum: int, frame: FrameType | None) -> NoReturn:
    del signum, frame
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    logs.configure(*log_options_from_env())  # the parent checked them already
    # While serving, uvicorn takes SIGTERM and SIGINT, stops gracefully, then raises the signal
    # again with the handler found before it ran: this one. Before, it stops start-up at once.
    # Either way a requested stop is exit status 0, not death by a signal.
    signal.signal(signal.SIGTERM, _exit_0)
    signal.signal(signal.SIGINT, _exit_0)
    try:
        serve(arguments)
    except typer.Exit as refused:  # a start-up refusal, already logged as `start_refused`
        raise SystemExit(refused.exit_code) from None


if __name__ == "__main__":
    main()
