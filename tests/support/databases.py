"""Fresh, migrated databases for tests: a SQLite file or a PostgreSQL database per test.

Each test run migrates one template per backend, then copies it per test (a file copy on
SQLite, `CREATE DATABASE ... TEMPLATE` on PostgreSQL), so every test starts on a freshly
migrated, empty database without paying for the migrations each time. Database names carry
the run's pid and a random suffix, so concurrent runs never share one.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database

ADMIN_URL = os.environ.get("PAYCORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_POSTGRES = os.environ.get("PAYCORE_REQUIRE_POSTGRES") == "1" or os.environ.get("CI") == "true"
RUN_ID = f"paycore_t{os.getpid()}_{secrets.token_hex(3)}"


def postgres_reachable() -> str | None:
    """None if PostgreSQL answers, else the reason it does not."""
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3, autocommit=True) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return str(error).strip()
    return None


def sqlalchemy_url(database_name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return base.replace("postgresql://", "postgresql+psycopg://", 1) + "/" + database_name


def _admin(statement: sql.Composed) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as connection:
        connection.execute(statement)


class PostgresDatabases:
    def __init__(self) -> None:
        self.template = f"{RUN_ID}_tpl"
        self._count = 0
        _admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
        database = Database(Settings(database_url=sqlalchemy_url(self.template), db_pool_size=2))
        migrate.upgrade(database)
        database.dispose()

    def new(self) -> str:
        self._count += 1
        name = f"{RUN_ID}_{self._count}"
        _admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.template)))
        return name

    @staticmethod
    def drop(name: str) -> None:
        _admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def close(self) -> None:
        self.drop(self.template)


class SqliteDatabases:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.template = directory / "template.db"
        self._count = 0
        database = Database(Settings(database_url=f"sqlite:///{self.template}"))
        migrate.upgrade(database)
        database.dispose()

    def new(self) -> Path:
        self._count += 1
        path = self.directory / f"test_{self._count}.db"
        shutil.copyfile(self.template, path)
        return path


@contextmanager
def fresh_url(backend: str, sqlite: SqliteDatabases | None, postgres: PostgresDatabases | None) -> Iterator[str]:
    if backend == "sqlite":
        assert sqlite is not None
        yield f"sqlite:///{sqlite.new()}"
        return
    assert postgres is not None
    name = postgres.new()
    try:
        yield sqlalchemy_url(name)
    finally:
        postgres.drop(name)
