"""`paycore tenants ...`"""

from __future__ import annotations

import typer
from rich.console import Console

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us, to_rfc3339
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


KEYS_LISTED_MAX = 1000  # a tenant has a handful of keys; the listing stops here whatever it has


def _database() -> Database:
    database = Database(Settings.from_env())
    if not migrate.is_usable(database):
        console.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
        raise typer.Exit(1)
    return database


@app.command()
def keys(tenant: str) -> None:
    """List TENANT's API keys: id, first characters, created, revoked (never the key itself)."""
    database = _database()
    with database.read() as connection:
        listed = tenants.list_keys(connection, tenant, limit=KEYS_LISTED_MAX)
    if not listed:
        console.print(f"[red]tenant {tenant!r} has no API keys[/red]")
        raise typer.Exit(1)
    for key in listed:
        revoked = "live" if key.revoked_at_us is None else f"revoked {to_rfc3339(key.revoked_at_us)}"
        print(f"{key.key_id}  {key.key_prefix}...  created {to_rfc3339(key.created_at_us)}  {revoked}")


@app.command("revoke-key")
def revoke_key(tenant: str, key_id: str) -> None:
    """Revoke TENANT's API key KEY_ID (see `paycore tenants keys`). Running servers refuse it
    within their key cache's period, a few seconds."""
    database = _database()
    revoked = database.transaction(
        lambda connection: tenants.revoke_key(connection, tenant, key_id, actor=actors.LOCAL, now_us=now_us())
    )
    if not revoked:
        console.print(f"[red]tenant {tenant!r} has no live API key {key_id!r}: nothing was revoked[/red]")
        raise typer.Exit(1)
    period_s = tenants.KEY_CACHE_PERIOD_S
    console.print(f"API key {key_id} of tenant {tenant} revoked; running servers refuse it within {period_s} seconds")


@app.command("rotate-key")
def rotate_key(tenant: str, key_id: str) -> None:
    """Issue TENANT a new API key in place of KEY_ID, which is revoked in the same transaction,
    and print the new key (shown once)."""
    database = _database()
    new_key = database.transaction(
        lambda connection: tenants.rotate_key(connection, tenant, key_id, actor=actors.LOCAL, now_us=now_us())
    )
    if new_key is None:
        console.print(f"[red]tenant {tenant!r} has no live API key {key_id!r}: no key was issued[/red]")
        raise typer.Exit(1)
    console.print(f"API key {key_id} of tenant {tenant} revoked. New API key (shown once, store it now):")
    print(new_key)
