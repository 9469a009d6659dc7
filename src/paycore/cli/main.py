"""`paycore` command line. No business logic: every command calls a service."""

from __future__ import annotations

import logging
import signal
import threading
import urllib.parse
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from paycore.cli import (
    db_commands,
    ledger_commands,
    operator_commands,
    processor_commands,
    reconcile_commands,
    report_commands,
    secrets_commands,
    simulate_commands,
    tenant_commands,
)
from paycore.cli.starting import bound_server, bound_socket, refuse_start
from paycore.config import SERVE_WORKERS_MAX, SQLITE_SERVE_WORKERS_DEFAULT, Settings, log_options_from_env
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit import logs
from paycore.processor.port import Processor

if TYPE_CHECKING:
    from paycore_sandbox.service import Sandbox
from paycore.operators import service as operators

app = typer.Typer(help="paycore: a payments core on an append-only double-entry ledger.", no_args_is_help=True)
app.add_typer(db_commands.app, name="db")
app.add_typer(ledger_commands.app, name="ledger")
app.add_typer(tenant_commands.app, name="tenants")
app.add_typer(operator_commands.app, name="operators")
app.add_typer(processor_commands.app, name="processor")
app.add_typer(report_commands.app, name="report")
app.add_typer(secrets_commands.app, name="secrets")
app.command(name="simulate")(simulate_commands.simulate)
app.command(name="reconcile")(reconcile_commands.reconcile)
console = Console(stderr=True)
log = logging.getLogger(__name__)
_SANDBOX_INTERVAL_MS = 200


@app.callback()
def _start() -> None:
    """paycore: a payments core on an append-only double-entry ledger."""
    start_logging()


def start_logging() -> None:
    """Every command logs JSON lines (or text) to standard error, configured before anything
    else runs. A bad PAYCORE_LOG_FORMAT/LEVEL is itself refused as a (JSON) log line."""
    try:
        log_format, log_level = log_options_from_env()
    except SystemExit:
        logs.configure()
        raise  # main() logs it as start_refused
    logs.configure(log_format, log_level)


def _shown(url: str) -> str:
    """A URL for a log line: without any user or password it may carry."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _http_processor(settings: Settings) -> Processor:
    from paycore.processor.http_transport import HttpTransport

    return HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)


def _dev_sandbox(settings: Settings, host: str, port: int) -> tuple[Processor, Sandbox]:
    """--dev: the sandbox processor in this process, on its own SQLite file, delivering its
    webhooks over HTTP to this server, as the real processor would."""
    from paycore_sandbox.inprocess import InProcessTransport
    from paycore_sandbox.service import Sandbox
    from paycore_sandbox.sink import http_sink

    sandbox = Sandbox.open(settings.sandbox_database_url, webhook_secret=settings.processor_webhook_secret)
    webhook_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    sandbox.start_background(http_sink(f"http://{webhook_host}:{port}/v1/webhooks/processor"), _SANDBOX_INTERVAL_MS)
    return InProcessTransport(sandbox, timeout_ms=settings.processor_timeout_ms), sandbox


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
    dev: bool = typer.Option(
        False, "--dev", help="Also run the workers and the sandbox processor in this process (SQLite default)."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        max=SERVE_WORKERS_MAX,
        help="API processes on the one socket (default: PAYCORE_SERVE_WORKERS, else one per core on PostgreSQL, "
        f"{SQLITE_SERVE_WORKERS_DEFAULT} on SQLite; --dev: 1 only).",
    ),
) -> None:
    """Run the HTTP API (with --dev: API, workers and the sandbox processor in one process)."""
    # The web stack is imported by the commands that serve, not by every command.
    from paycore.http.app import create_app
    from paycore.http.exposure import is_loopback
    from paycore.http.server import tune_gc_for_serving
    from paycore.workers.jobs import WorkerContext
    from paycore.workers.loop import run_forever

    settings = Settings.from_env()
    database = Database(settings)
    processes = _api_processes(workers, settings, database, dev=dev)
    if dev or not database.is_postgres:
        migrate.upgrade(database)  # the embedded default migrates itself; PostgreSQL is upgraded by hand
    elif not migrate.is_usable(database):
        raise refuse_start("the database schema is behind: run `paycore db upgrade` first", reason="schema_behind")
    with database.read() as connection:
        local_mode = operators.local_mode(connection)
    _refuse_unsafe_bind(host, local_mode, settings)
    # A developer's machine keeps the key file --dev made in local mode, on loopback only.
    dev_key_file = dev and is_loopback(host)
    keyring = secrets_commands.keyring_or_exit(settings, local_mode=lambda: local_mode, dev_key_file=dev_key_file)
    if processes > 1:
        raise typer.Exit(_serve_processes(processes, host, port, local_mode, database, settings))
    sandbox = None
    if dev:
        processor, sandbox = _dev_sandbox(settings, host, port)
    else:
        processor = _http_processor(settings)
    stop = threading.Event()
    if dev:
        context = WorkerContext.create(database, settings, processor, keyring)
        threading.Thread(target=run_forever, args=(context, stop), daemon=True, name="worker").start()
    app = create_app(settings, database, processor, keyring)
    mounted = sandbox is not None and is_loopback(host)
    if sandbox is not None and mounted:
        from paycore_sandbox.http import create_app as create_sandbox_app

        # The sandbox's own API (fault plan, charges, settlement CSV) under /sandbox: on a
        # loopback bind only, as anyone who reaches it can script the processor's answers.
        app.mount("/sandbox", create_sandbox_app(sandbox))
    log.info(
        _start_line(host, port, local_mode, database, settings, dev=dev, sandbox_mounted=mounted),
        extra={"event": "serve_started", "host": host, "port": port, "local_mode": local_mode, "dev": dev},
    )
    try:
        server = bound_server(app, host, port, settings)
        tune_gc_for_serving()
        server.serve_forever()
    finally:
        stop.set()


def _api_processes(workers: int | None, settings: Settings, database: Database, *, dev: bool) -> int:
    """How many API processes serve: `--workers`, else the setting or the database's default.
    `--dev` runs its workers and its sandbox in the one process that serves, so it is one."""
    if workers is None and dev:
        workers = settings.serve_workers or 1  # the setting, if any, is refused below as the flag is
    elif workers is None:
        workers = settings.serve_workers_for(is_postgres=database.is_postgres)
    if dev and workers > 1:
        raise refuse_start(
            f"--dev runs one process (API, workers, sandbox processor); got {workers} API processes: "
            "for several, run `paycore serve --workers N`, `paycore worker` and `paycore processor serve`",
            reason="dev_workers",
        )
    assert 1 <= workers <= SERVE_WORKERS_MAX, workers
    return workers


def _serve_processes(count: int, host: str, port: int, local_mode: bool, database: Database, settings: Settings) -> int:
    """`count` API processes on one socket bound here (ADR 0028); the exit status. This process
    lets go of its database before any child starts: each child opens its own."""
    from paycore.cli.supervisor import supervise

    _warn_connections_over(count, database, settings)
    database.dispose()
    with bound_socket(host, port) as listening:
        bound_port = int(listening.getsockname()[1])
        line = _start_line(host, bound_port, local_mode, database, settings, dev=False, sandbox_mounted=False)
        log.info(
            f"{line}, {count} API processes",
            extra={"event": "serve_started", "host": host, "port": bound_port, "local_mode": local_mode, "dev": False}
            | {"workers": count},
        )
        return supervise(listening, count, host, bound_port)


API_POOLS = 2  # an API process's pools of PAYCORE_DB_POOL_SIZE connections: the engine's, the loop's


def _warn_connections_over(count: int, database: Database, settings: Settings) -> None:
    """PAYCORE_DB_POOL_SIZE is per pool: say so when the processes together may ask PostgreSQL
    for more connections than it takes (then some requests wait or fail at peak). An API
    process has two pools of that size: the engine's, and its event loop's for the money
    path's one-call phases (`db/loop_calls.py`)."""
    if not database.is_postgres:
        return
    from paycore.db.engines import connections_max as postgres_connections_max

    with database.read() as connection:
        connections_max = postgres_connections_max(connection)
    wanted = count * settings.db_pool_size * API_POOLS
    if wanted > connections_max:
        log.warning(
            "%d API processes with PAYCORE_DB_POOL_SIZE=%d (two pools each) may open %d connections; "
            "PostgreSQL takes %d (max_connections): lower one, or raise max_connections",
            count,
            settings.db_pool_size,
            wanted,
            connections_max,
            extra={"event": "serve_connections_over", "wanted": wanted, "connections_max": connections_max},
        )


def _start_line(
    host: str, port: int, local_mode: bool, database: Database, settings: Settings, *, dev: bool, sandbox_mounted: bool
) -> str:
    if not dev:
        where = _shown(settings.processor_url)
    elif sandbox_mounted:
        where = f"in-process sandbox at /sandbox ({_shown(settings.sandbox_database_url)})"
    else:
        sandbox_url = _shown(settings.sandbox_database_url)
        where = f"in-process sandbox ({sandbox_url}), its API not mounted: the bind is not loopback"
    return (
        f"paycore on http://{host}:{port} ({'local mode' if local_mode else 'API keys required'}, "
        f"database {database.dialect}, processor {where})"
    )


def _refuse_unsafe_bind(host: str, local_mode: bool, settings: Settings) -> None:
    """The rules live in paycore.http.exposure (every entry point passes them, and it logs the
    `start_refused` line); here they are checked before the sandbox and the workers start, and
    a refusal is exit status 2."""
    from paycore.http.exposure import UnsafeBind, check_bind

    try:
        check_bind(host, local_mode=local_mode, webhook_secret=settings.processor_webhook_secret)
    except UnsafeBind:
        raise typer.Exit(2) from None


@app.command()
def worker(
    once: bool = typer.Option(False, "--once", help="Run one round of every job and exit."),
) -> None:
    """Run the background jobs: in-doubt resolution, webhook re-matching, hold expiry, key pruning,
    the money invariant checks, reconciliation of closed days, and outgoing webhook delivery (in
    PAYCORE_WEBHOOK_CONCURRENCY_MAX threads of its own). SIGTERM or Ctrl-C stops it once the
    webhook calls in flight are recorded.
    The processor is reached over HTTP at PAYCORE_PROCESSOR_URL."""
    from paycore.workers.jobs import WorkerContext
    from paycore.workers.loop import run_forever, run_once

    settings = Settings.from_env()
    database = Database(settings)
    keyring = secrets_commands.keyring_or_exit(settings, local_mode=lambda: operators.local_mode_now(database))
    context = WorkerContext.create(database, settings, _http_processor(settings), keyring)
    if once:
        try:
            result = run_once(context)
        finally:
            database.dispose()
        console.print(result.done)
        if result.failed:  # each failure is already a `job_failed` log line
            raise typer.Exit(1)
        return
    stop = threading.Event()
    # SIGTERM (a deploy, a restart) stops the worker as Ctrl-C does: the delivery threads record
    # the call in flight and let go of their endpoint first, so nothing waits out a lease.
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    log.info(
        "paycore worker %s (database %s, processor %s)",
        context.worker_id,
        database.dialect,
        _shown(settings.processor_url),
        extra={"event": "worker_started", "worker_id": context.worker_id},
    )
    try:
        run_forever(context, stop)
    except KeyboardInterrupt:
        stop.set()


def main() -> None:
    """The `paycore` console script. A setting that stops the process (`SystemExit` with a
    message, e.g. from `Settings.from_env`) is a `start_refused` log line instead of Python's
    plain-text message, so standard error stays JSON lines; the exit status stays 1."""
    try:
        app()
    except SystemExit as stop:
        if not isinstance(stop.code, str):
            raise
        logs.configure_unless_configured()
        log.error(stop.code, extra={"event": "start_refused", "reason": "configuration"})
        raise SystemExit(1) from None
