"""`paycore` command line. No business logic: every command calls a service."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from paycore.cli import (
    db_commands,
    ledger_commands,
    processor_commands,
    report_commands,
    simulate_commands,
    tenant_commands,
)
from paycore.config import DEV_WEBHOOK_SECRET, Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.server import is_loopback, tune_gc_for_serving
from paycore.processor.port import Processor

if TYPE_CHECKING:
    from paycore.sandbox.service import Sandbox
from paycore.tenants import service as tenants

app = typer.Typer(help="paycore: a payments core on an append-only double-entry ledger.", no_args_is_help=True)
app.add_typer(db_commands.app, name="db")
app.add_typer(ledger_commands.app, name="ledger")
app.add_typer(tenant_commands.app, name="tenants")
app.add_typer(processor_commands.app, name="processor")
app.add_typer(report_commands.app, name="report")
app.command(name="simulate")(simulate_commands.simulate)
console = Console(stderr=True)
_SANDBOX_INTERVAL_MS = 200


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _http_processor(settings: Settings) -> Processor:
    from paycore.processor.http_transport import HttpTransport

    return HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)


def _dev_sandbox(settings: Settings, host: str, port: int) -> tuple[Processor, Sandbox]:
    """--dev: the sandbox processor in this process, on its own SQLite file, delivering its
    webhooks over HTTP to this server, as the real processor would."""
    from paycore.processor.inprocess import InProcessTransport
    from paycore.sandbox.service import Sandbox
    from paycore.sandbox.webhooks import http_sink

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
) -> None:
    """Run the HTTP API (with --dev: API, workers and the sandbox processor in one process)."""
    import uvicorn

    from paycore.http.app import create_app
    from paycore.workers.jobs import WorkerContext
    from paycore.workers.loop import run_forever

    _logging()
    settings = Settings.from_env()
    database = Database(settings)
    if dev or not database.is_postgres:
        migrate.upgrade(database)  # the embedded default migrates itself; PostgreSQL is upgraded by hand
    elif not migrate.is_usable(database):
        raise typer.BadParameter("the database schema is behind: run `paycore db upgrade` first")
    with database.read() as connection:
        local_mode = not tenants.auth_required(connection)
    _refuse_unsafe_bind(host, local_mode, settings)
    sandbox = None
    if dev:
        processor, sandbox = _dev_sandbox(settings, host, port)
    else:
        processor = _http_processor(settings)
    stop = threading.Event()
    if dev:
        context = WorkerContext.create(database, settings, processor)
        threading.Thread(target=run_forever, args=(context, stop), daemon=True, name="worker").start()
    where = f"in-process sandbox at /sandbox ({settings.sandbox_database_url})" if dev else settings.processor_url
    console.print(
        f"paycore on http://{host}:{port} ({'local mode' if local_mode else 'API keys required'}, "
        f"database {database.dialect}, processor {where})"
    )
    app = create_app(settings, database, processor)
    if sandbox is not None:
        from paycore.sandbox.http import create_app as create_sandbox_app

        # The sandbox's own API (fault plan, charges, settlement CSV) under /sandbox.
        app.mount("/sandbox", create_sandbox_app(sandbox))
    tune_gc_for_serving()
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
        )
    finally:
        stop.set()


def _refuse_unsafe_bind(host: str, local_mode: bool, settings: Settings) -> None:
    if is_loopback(host):
        return
    if local_mode:
        console.print(
            f"[red]refusing to bind {host}: no API key exists yet (local mode accepts requests without "
            "authentication). Create one with `paycore tenants create NAME`, or bind 127.0.0.1.[/red]"
        )
        raise typer.Exit(2)
    if settings.processor_webhook_secret == DEV_WEBHOOK_SECRET:
        console.print(
            f"[red]refusing to bind {host}: PAYCORE_PROCESSOR_WEBHOOK_SECRET is the public development default, "
            "so anyone could forge processor webhooks. Set it to your processor's signing secret.[/red]"
        )
        raise typer.Exit(2)


@app.command()
def worker(
    once: bool = typer.Option(False, "--once", help="Run one round of every job and exit."),
) -> None:
    """Run the background jobs: in-doubt resolution, webhook re-matching, hold expiry, key pruning,
    the money invariant checks.
    The processor is reached over HTTP at PAYCORE_PROCESSOR_URL."""
    from paycore.workers.jobs import WorkerContext
    from paycore.workers.loop import run_forever, run_once

    _logging()
    settings = Settings.from_env()
    database = Database(settings)
    context = WorkerContext.create(database, settings, _http_processor(settings))
    if once:
        try:
            console.print(run_once(context))
        finally:
            database.dispose()
        return
    stop = threading.Event()
    console.print(
        f"paycore worker {context.worker_id} (database {database.dialect}, processor {settings.processor_url})"
    )
    try:
        run_forever(context, stop)
    except KeyboardInterrupt:
        stop.set()


def main() -> None:
    app()
