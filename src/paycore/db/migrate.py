"""Run Alembic migrations programmatically, safely from several processes at once."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from paycore.db.engine import Database

MIGRATIONS_PATH = Path(__file__).parent / "migrations"
# Any constant will do: it only has to be the same in every paycore process.
_ADVISORY_LOCK_KEY = 0x70617963  # "payc"
# Alembic keeps the running migration's context in module globals (`alembic.context`,
# `alembic.op`): two upgrades at once in one process would run on each other's connections
# (e.g. concurrent `paycore.refunds.handle` calls, each migrating its own memory database).
_IN_PROCESS_LOCK = threading.Lock()


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_PATH))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(database: Database, revision: str = "head") -> None:
    """Upgrade to `revision`. On PostgreSQL an advisory lock serialises concurrent upgrades;
    on SQLite the migration's transaction takes the write lock when it begins."""
    config = alembic_config()
    with database.engine.connect() as connection:
        if database.is_postgres:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
            connection.commit()
        try:
            config.attributes["connection"] = connection
            with _IN_PROCESS_LOCK:
                command.upgrade(config, revision)
            connection.commit()
        finally:
            if database.is_postgres:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _ADVISORY_LOCK_KEY})
                connection.commit()


def is_current(database: Database) -> bool:
    return current_revision(database) == head_revision()
