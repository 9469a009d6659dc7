"""`paycore tenants ...`"""

from __future__ import annotations

import typer
from rich.console import Console

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError
from paycore.tenants import service as tenants

app = typer.Typer(help="Tenants and their API keys.", no_args_is_help=True)
console = Console()


@app.command()
def create(name: str) -> None:
    """Create tenant NAME and print its API key (shown once; only its hash is stored)."""
    database = Database(Settings.from_env())
    if not migrate.is_usable(database):
        if database.is_postgres:
            console.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
            raise typer.Exit(1)
        migrate.upgrade(database)  # the embedded default migrates itself, as `paycore serve` does
    try:
        created = database.transaction(lambda connection: tenants.create_tenant(connection, name, now_us=now_us()))
    except DomainError as error:
        console.print(f"[red]{error.message}[/red]")
        raise typer.Exit(1) from error
    console.print(f"tenant {created.tenant_id} created. API key (shown once, store it now):")
    print(created.api_key)
