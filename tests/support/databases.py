"""Fresh, migrated databases for tests: a SQLite file or a PostgreSQL database per test.

Each test run migrates one template per backend, then copies it per test (a file copy on
SQLite, `CREATE DATABASE ... TEMPLATE` on PostgreSQL), so every test starts on a freshly
migrated, empty database without paying for the migrations each time. On PostgreSQL a
database a test is done with is renamed, emptied and reused rather than copied again
(`PostgresDatabases`). Database names carry the run's pid and a random suffix, so concurrent
runs never share one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database

ADMIN_URL = os.environ.get("PAYCORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_POSTGRES = os.environ.get("PAYCORE_REQUIRE_POSTGRES") == "1" or os.environ.get("CI") == "true"
# The server at ADMIN_URL is a Citus coordinator: each test's database is distributed (citus_databases.py).
CITUS = os.environ.get("PAYCORE_TEST_CITUS") == "1"
RUN_ID = f"paycore_t{os.getpid()}_{secrets.token_hex(3)}"


def postgres_reachable() -> str | None:
    """None if PostgreSQL answers, else the reason it does not."""
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3, autocommit=True) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return str(error).strip()
    return None


def _libpq_url(database_name: str) -> str:
    """The admin URL's server and role, on `database_name`."""
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{database_name}"


def sqlalchemy_url(database_name: str) -> str:
    return _libpq_url(database_name).replace("postgresql://", "postgresql+psycopg://", 1)


def _admin(statement: sql.Composed) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as connection:
        connection.execute(statement)


# What a database's tests could change beyond its rows: relations and their columns, defaults,
# grants, functions, triggers (and whether they are enabled), constraints, indexes, schemas,
# extensions, per-database settings and the database's own connection rules.
_FINGERPRINT = """
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
  SELECT format('rel %s %s %s', c.oid::regclass, c.relkind, c.relacl)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_t%'
  UNION ALL
  SELECT format('col %s %s %s %s %s', a.attrelid::regclass, a.attname, format_type(a.atttypid, a.atttypmod),
                a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
     AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_t%'
  UNION ALL
  SELECT format('fn %s %s %s', p.oid::regprocedure, md5(p.prosrc), p.proacl)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  UNION ALL
  SELECT format('trg %s %s %s', tgrelid::regclass, tgname, tgenabled) FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT format('con %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('idx %s', pg_get_indexdef(indexrelid)) FROM pg_index
   WHERE indrelid::regclass::text NOT LIKE 'pg_%'
  UNION ALL
  SELECT format('ns %s %s', nspname, nspacl) FROM pg_namespace
  UNION ALL
  SELECT format('ext %s %s', extname, extversion) FROM pg_extension
  UNION ALL
  SELECT format('set %s %s', setrole, setconfig) FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT format('db %s %s %s', datallowconn, datconnlimit, datacl)
    FROM pg_database WHERE datname = current_database()
) AS items (item)
"""

_TABLES = """
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg_t%'
"""

# The tables that hold any page on disk: the ones a test wrote to (or the template's own rows).
_USED = "SELECT relation FROM unnest(%s::text[]) AS relation WHERE pg_relation_size(relation::regclass) > 0"

_SEQUENCES = "SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences"


def _relaxed(name: str) -> None:
    """A test database's commits do not wait for the WAL to reach the disk
    (`synchronous_commit = off`): what a test sees is the same (a commit is atomic and visible
    at once); only a crash of the PostgreSQL server itself could lose the last commits, and no
    test crashes it. Waiting for fsync on every commit was test time spent on durability no test
    checks. The setting is the database's, so the copies and every connection get it."""
    _admin(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name)))


def _connect(name: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(_libpq_url(name), autocommit=True)


def _fingerprint(connection: psycopg.Connection[tuple[object, ...]]) -> str:
    row = connection.execute(_FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


def _moved(name: str, to: str, tries_max: int = 3, waits_max: int = 250) -> bool:
    """Rename `name` to `to` once no backend is on it (ending them, waiting in 20 ms steps).

    The new name keeps a process a test left behind from ever writing to the next test's
    database: it can no longer connect by the old name, as when the database was dropped.
    """
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        for _ in range(tries_max):
            for _ in range(waits_max):
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
                ).fetchall()
                if not ended:
                    break
                time.sleep(0.02)
            try:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(to))
                )
            except psycopg.errors.ObjectInUse:
                continue  # a backend came back between the check and the rename
            return True
    return False


@dataclass(frozen=True)
class _Baseline:
    """The freshly migrated template: its fingerprint, tables, own rows and sequence values."""

    fingerprint: str
    tables: tuple[str, ...]
    rows: dict[str, bytes]
    sequences: tuple[tuple[str, object], ...]

    @classmethod
    def read(cls, connection: psycopg.Connection[tuple[object, ...]]) -> _Baseline:
        tables = tuple(str(row[0]) for row in connection.execute(_TABLES))
        rows: dict[str, bytes] = {}
        for table in tables:
            if connection.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() != (True,):
                continue  # nothing of the template's own to put back
            with connection.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
                rows[table] = b"".join(bytes(block) for block in copy)
        sequences = tuple((str(name), value) for name, value in connection.execute(_SEQUENCES))
        return cls(_fingerprint(connection), tables, rows, sequences)

    def restore(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        """Inside a transaction: every table as the template has it, to the planner too.

        Only the tables with any page on disk are truncated (a TRUNCATE costs ~10 ms a table
        here, since it makes new files for the table and its indexes; all 29 took 0.4 s), and
        their planner statistics go with them, so a plan is chosen as on a fresh copy: a
        DELETE would leave pages and statistics that change the plans (a test reading an
        EXPLAIN saw another index). Triggers are off, as on a replica, so the append-only
        tables can be emptied too.
        """
        used = [str(row[0]) for row in connection.execute(_USED, [list(self.tables)])]
        connection.execute("SET LOCAL session_replication_role = replica")
        if used:
            connection.execute(f"TRUNCATE {', '.join(used)} RESTART IDENTITY")
            connection.execute("DELETE FROM pg_statistic WHERE starelid = ANY (%s::regclass[])", [used])
        for table, data in self.rows.items():
            with connection.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                copy.write(data)
        for name, value in self.sequences:
            if value is None:
                connection.execute(f"ALTER SEQUENCE {name} RESTART")
            else:
                connection.execute("SELECT setval(%s, %s, true)", [name, value])


class PostgresDatabases:
    """One template per run; per test a database from this worker's free list, else a copy.

    `CREATE DATABASE ... TEMPLATE` costs ~0.4 s here (it syncs every file of the copy), which
    made it most of a PostgreSQL test's time. A database a test is done with is therefore
    reused (`release`): every backend on it ended, renamed (so nothing the test left running
    can reach it again), every table emptied and the template's own rows and sequence values
    put back, in one transaction. It is reused only if its schema, settings and grants still
    match the template's (`_FINGERPRINT`); a test that changed any of them leaves its database
    to be dropped, as before.
    """

    def __init__(self) -> None:
        self.template = f"{RUN_ID}_tpl"
        self._count = 0
        self._free: list[str] = []
        _admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
        _relaxed(self.template)
        database = Database(Settings(database_url=sqlalchemy_url(self.template), db_pool_size=2))
        migrate.upgrade(database)
        database.dispose()
        with _connect(self.template) as connection:
            self._baseline = _Baseline.read(connection)

    def new(self) -> str:
        if self._free:
            return self._free.pop()
        name = self._next_name()
        _admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.template)))
        _relaxed(name)
        return name

    def release(self, name: str) -> None:
        """Rename and empty `name` for the next test, or drop it if the test changed more than its rows."""
        fresh = self._next_name()
        if not _moved(name, fresh):
            self.drop(name)
        elif self._reset(fresh):
            self._free.append(fresh)
        else:
            self.drop(fresh)

    def _next_name(self) -> str:
        self._count += 1
        return f"{RUN_ID}_{self._count}"

    def _reset(self, name: str) -> bool:
        try:
            with _connect(name) as connection:
                if _fingerprint(connection) != self._baseline.fingerprint:
                    return False
                with connection.transaction():
                    self._baseline.restore(connection)
        except psycopg.Error:
            return False  # e.g. a test left it refusing connections, or the role is no superuser
        return True

    @staticmethod
    def drop(name: str) -> None:
        _admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def close(self) -> None:
        for name in self._free:
            self.drop(name)
        self._free.clear()
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
        postgres.release(name)
