"""`paycore db ...`"""

from __future__ import annotations

import typer
from rich.console import Console

from paycore.config import Settings
from paycore.db import distribute as distributing
from paycore.db import migrate, statistics
from paycore.db.engine import Database

app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
console = Console()


@app.command()
def upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply migrations up to REVISION (default: head), then ANALYZE the tables that hold rows.
    Safe to run from several processes."""
    database = Database(Settings.from_env())
    before = migrate.current_revision(database)
    migrate.upgrade(database, revision)
    console.print(f"database at revision {migrate.current_revision(database)} (was {before})")
    with database.engine.connect() as connection:
        if statistics.autovacuum_is_off(connection):
            console.print(
                "warning: autovacuum is off on this PostgreSQL server, so nothing keeps the planner's"
                " statistics current: run ANALYZE after loading data and regularly (docs/operations.md)"
            )


@app.command()
def current() -> None:
    """Print the database's revision and the code's head revision."""
    database = Database(Settings.from_env())
    console.print(f"database: {migrate.current_revision(database)}  code head: {migrate.head_revision()}")


@app.command()
def distribute() -> None:
    """On a Citus coordinator: distribute every tenant table by tenant_id, colocated, and make
    the small global tables reference tables (ADR 0031). Run after `paycore db upgrade`; a
    second run does nothing. Refuses (exit code 2) on plain PostgreSQL and on SQLite."""
    database = Database(Settings.from_env())
    try:
        current_revision = migrate.current_revision(database)
        if current_revision != migrate.HEAD_REVISION:
            console.print(
                f"refused: the database is at revision {current_revision}, the code at {migrate.HEAD_REVISION}:"
                " run `paycore db upgrade` first"
            )
            raise typer.Exit(2)
        placed = distributing.distribute(database, lambda line: console.print(line, highlight=False))
    except distributing.NotCitus as refusal:
        console.print(f"refused: {refusal}", highlight=False)
        raise typer.Exit(2) from None
    except distributing.CannotDistribute as problem:
        console.print(f"cannot distribute: {problem}", highlight=False)
        raise typer.Exit(1) from None
    finally:
        database.dispose()
    if placed == 0:
        console.print("nothing to do: every table is already placed and every server function delegated")
    else:
        console.print(f"made {placed} change(s); the database is distributed by tenant")
