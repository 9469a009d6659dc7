"""`paycore db ...`"""

from __future__ import annotations

import typer
from rich.console import Console

from paycore.config import Settings
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
