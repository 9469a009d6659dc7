"""`paycore` command line. No business logic: every command calls a service."""

from __future__ import annotations

import logging
import threading

import typer
from rich.console import Console

from paycore.cli import db_commands, ledger_commands, tenant_commands
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.server import is_loopback
from paycore.tenants import service as tenants

app = typer.Typer(help="paycore: a payments core on an append-only double-entry ledger.", no_args_is_help=True)
app.add_typer(db_commands.app, name="db")
app.add_typer(ledger_commands.app, name="ledger")
app.add_typer(tenant_commands.app, name="tenants")
console = Console(stderr=True)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
    dev: bool = typer.Option(False, "--dev", help="Also run the workers in this process."),
) -> None:
    """Run the HTTP API (with --dev: API and workers in one process, migrations applied)."""
    import uvicorn

    from paycore.http.app import create_app
    from paycore.workers.loop import run_forever

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    database = Database(settings)
    if dev or not database.is_postgres:
        migrate.upgrade(database)  # the embedded default migrates itself; PostgreSQL is upgraded by hand
    elif not migrate.is_current(database):
        raise typer.BadParameter("the database schema is behind: run `paycore db upgrade` first")
    with database.read() as connection:
        local_mode = not tenants.auth_required(connection)
    if local_mode and not is_loopback(host):
        console.print(
            f"[red]refusing to bind {host}: no API key exists yet (local mode accepts requests without "
            "authentication). Create one with `paycore tenants create NAME`, or bind 127.0.0.1.[/red]"
        )
        raise typer.Exit(2)
    stop = threading.Event()
    if dev:
        threading.Thread(target=run_forever, args=(database, settings, stop), daemon=True, name="worker").start()
    console.print(
        f"paycore on http://{host}:{port} ({'local mode' if local_mode else 'API keys required'}, "
        f"database {database.dialect})"
    )
    try:
        uvicorn.run(
            create_app(settings, database),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
        )
    finally:
        stop.set()


@app.command()
def worker(
    once: bool = typer.Option(False, "--once", help="Run one round of every job and exit."),
) -> None:
    """Run the background jobs (pending-transfer expiry, idempotency-key pruning)."""
    from paycore.workers.loop import run_forever, run_once

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    database = Database(settings)
    if once:
        console.print(run_once(database, settings))
        return
    stop = threading.Event()
    try:
        run_forever(database, settings, stop)
    except KeyboardInterrupt:
        stop.set()


def main() -> None:
    app()
