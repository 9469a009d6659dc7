"""An empty in-memory SQLite database upgraded to head, or a new file given to `upgrade_new`,
is a copy of the process's migrated template (`paycore.db.migrate._SqliteTemplate`): it must
be what the migrations write, and each copy its own database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from sqlalchemy import Connection

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database

_INSERT = "INSERT INTO tenants (tenant_id, name, created_at_us) VALUES (?, 'a tenant', 0)"
_SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"


def _memory() -> Database:
    return Database(Settings(database_url="sqlite://"))


def _lines(sql: object) -> list[str]:
    """A CREATE statement's lines, sorted without their commas: Alembic's batch mode rebuilds a
    table with its constraints in set order, so two runs of the migrations themselves may list
    them in another order."""
    return sorted(line.strip().rstrip(",").strip() for line in str(sql).splitlines())


Contents = tuple[list[tuple[object, ...]], dict[str, list[tuple[object, ...]]]]


def _contents(connection: Connection) -> Contents:
    schema: list[tuple[object, ...]] = [
        (kind, name, table, _lines(sql)) for kind, name, table, sql in connection.exec_driver_sql(_SCHEMA)
    ]
    tables = [str(row[1]) for row in schema if row[0] == "table" and not str(row[1]).startswith("sqlite_")]
    rows = {table: [tuple(row) for row in connection.exec_driver_sql(f'SELECT * FROM "{table}"')] for table in tables}
    return schema, rows


def test_a_copy_is_what_the_migrations_write() -> None:
    migrated, copied = _memory(), _memory()
    try:
        migrate.run(migrated, lambda config: command.upgrade(config, "head"))  # the migrations themselves
        migrate.upgrade(copied)
        with migrated.engine.connect() as left, copied.engine.connect() as right:
            expected, got = _contents(left), _contents(right)
        assert got == expected
        assert expected[1]["alembic_version"] == [(migrate.head_revision(),)]
        assert migrate.is_current(copied)
    finally:
        migrated.dispose()
        copied.dispose()


def test_each_copy_is_its_own_database_with_its_own_connection_settings() -> None:
    first, second = _memory(), _memory()
    try:
        migrate.upgrade(first)
        migrate.upgrade(second)
        first.transaction(lambda c: c.exec_driver_sql(_INSERT, ("only_first",)))
        with first.engine.connect() as left, second.engine.connect() as right:
            assert left.exec_driver_sql("SELECT tenant_id FROM tenants").fetchall() == [("only_first",)]
            assert right.exec_driver_sql("SELECT tenant_id FROM tenants").fetchall() == []
            assert right.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    finally:
        first.dispose()
        second.dispose()


def test_a_database_that_is_not_empty_is_migrated_not_overwritten() -> None:
    database = _memory()
    try:
        migrate.upgrade(database)
        database.transaction(lambda c: c.exec_driver_sql(_INSERT, ("kept",)))
        migrate.upgrade(database)
        with database.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT tenant_id FROM tenants").fetchall() == [("kept",)]
    finally:
        database.dispose()


def test_a_new_file_is_a_copy_in_wal_mode_that_every_connection_sees(tmp_path: Path) -> None:
    """`upgrade_new` (each world of `paycore simulate`): the file gets the template's pages and
    keeps the journal mode its connections set; a second connection reads the same schema."""
    migrated, copied = _memory(), Database(Settings(database_url=f"sqlite:///{tmp_path / 'new.db'}"))
    try:
        migrate.run(migrated, lambda config: command.upgrade(config, "head"))
        migrate.upgrade_new(copied)
        with migrated.engine.connect() as left, copied.engine.connect() as right:
            assert _contents(right) == _contents(left)
            assert right.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        with sqlite3.connect(tmp_path / "new.db") as other:
            assert other.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert other.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrate.head_revision(),)]
        copied.transaction(lambda c: c.exec_driver_sql(_INSERT, ("kept",)))
        migrate.upgrade_new(copied)  # not empty now: migrated (a no-op at head), not overwritten
        with copied.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT tenant_id FROM tenants").fetchall() == [("kept",)]
    finally:
        migrated.dispose()
        copied.dispose()
