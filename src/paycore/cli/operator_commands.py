"""`paycore operators ...`: the people who use the console."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.clock import now_us, to_rfc3339
from paycore.kit.errors import DomainError
from paycore.operators import service as operators
from paycore.operators.types import ROLES

app = typer.Typer(help="Operators: the people who use the console (/ops), with their roles.", no_args_is_help=True)
console = Console()
error_console = Console(stderr=True)


def _database() -> Database:
    database = Database(Settings.from_env())
    if not migrate.is_usable(database):
        if database.is_postgres:
            error_console.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
            database.dispose()
            raise typer.Exit(1)
        migrate.upgrade(database)  # the embedded default migrates itself, as `paycore serve` does
    return database


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="1-40 characters of [a-z0-9_.-]: the audit log says operator:NAME")],
    role: Annotated[str, typer.Option(help=f"one of {', '.join(ROLES)}")],
    tenant: Annotated[str | None, typer.Option(help="the one tenant they work in; omitted: every tenant")] = None,
) -> None:
    """Create operator NAME and print their token, once, alone on the last line (only its hash
    is stored). They sign in at /ops/login with it."""
    database = _database()
    try:
        made = database.transaction(
            lambda connection: operators.create_operator(connection, name, role, tenant_id=tenant, now_us=now_us())
        )
    except DomainError as error:
        error_console.print(f"[red]{escape(error.message)}[/red]")
        raise typer.Exit(1) from error
    finally:
        database.dispose()
    scope = f"tenant {tenant}" if tenant else "every tenant"
    console.print(
        f"operator {made.operator.name} created ({made.operator.role}, {scope}). Token (shown once, store it now):"
    )
    print(made.token)


@app.command("list")
def list_operators() -> None:
    """Every operator: name, role, tenant, status, token prefix, created."""
    database = _database()
    try:
        with database.read() as connection:
            found = operators.list_operators(connection)
    finally:
        database.dispose()
    table = Table("name", "role", "tenant", "status", "token", "created")
    for operator in found:
        status = "active" if operator.disabled_at_us is None else f"disabled {to_rfc3339(operator.disabled_at_us)}"
        table.add_row(
            operator.name,
            operator.role,
            operator.scope or "(every tenant)",
            status,
            operator.token_prefix + "…",
            to_rfc3339(operator.created_at_us),
        )
    console.print(table)


@app.command()
def disable(name: str) -> None:
    """Disable operator NAME: their token stops working and their sessions end at once."""
    database = _database()
    try:
        operator = database.transaction(
            lambda connection: operators.disable_operator(connection, name, now_us=now_us())
        )
    except DomainError as error:
        error_console.print(f"[red]{escape(error.message)}[/red]")
        raise typer.Exit(1) from error
    finally:
        database.dispose()
    console.print(f"operator {operator.name} disabled; their sessions have ended")
