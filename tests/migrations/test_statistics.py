"""The planner's statistics (`paycore.db.statistics`): an upgrade that migrates ANALYZEs every
table that holds a row and leaves the empty ones unanalyzed (PostgreSQL plans an analyzed empty
table as the few pages it has, and keeps such a plan: ADR 0027); SQLite's connections run
`PRAGMA optimize` now and then and when they close, without waiting on a busy writer."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db import migrate, statistics
from paycore.db.engine import Database
from tests.migrations import test_migrations

empty_database = test_migrations.empty_database  # the fixture: a database with no tables at all

_TENANT = "INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ('acme', 'Acme', 1)"


def analyzed_tables(connection: Connection) -> set[str]:
    if connection.dialect.name == "sqlite":
        if connection.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").scalar():
            return {str(row[0]) for row in connection.exec_driver_sql("SELECT DISTINCT tbl FROM sqlite_stat1")}
        return set()
    rows = connection.exec_driver_sql(
        "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL"
    )
    return {str(row[0]) for row in rows}


def test_an_upgrade_analyzes_the_tables_that_hold_rows_and_only_those(empty_database: Database) -> None:
    migrate.upgrade(empty_database, "0024")
    with empty_database.engine.connect() as connection:
        connection.execute(text(_TENANT))
        connection.commit()
        before = analyzed_tables(connection)
    migrate.upgrade(empty_database)
    with empty_database.engine.connect() as connection:
        after = analyzed_tables(connection)
        if empty_database.is_postgres:  # never analyzed: planned as ten pages at least, not one
            reltuples = "SELECT reltuples FROM pg_class WHERE relname = 'payments'"
            assert connection.exec_driver_sql(reltuples).scalar() == -1
    assert "tenants" not in before
    assert {"tenants", "alembic_version"} <= after
    assert not after & {"payments", "ledger_entries", "events", "refunds"}  # empty: left alone


def test_an_upgrade_with_nothing_to_run_gathers_nothing(empty_database: Database) -> None:
    migrate.upgrade(empty_database)
    with empty_database.engine.connect() as connection:
        connection.execute(text(_TENANT))
        connection.commit()
    migrate.upgrade(empty_database)  # at head: every process's start does this
    with empty_database.engine.connect() as connection:
        assert "tenants" not in analyzed_tables(connection)


_EVENT = (
    "INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, cause, actor, data, created_at_us)"
    " VALUES ('acme', 'evt_1', 'note', 'note', 'payment', 'pay_1', 'test', 'local', '{}', 1)"
)


def _database_with_rows(path: Path) -> Database:
    database = Database(Settings(database_url=f"sqlite:///{path}"))
    migrate.upgrade(database)
    with database.engine.connect() as connection:
        connection.execute(text(_EVENT))
        connection.commit()
    return database


def _read_by_index(database: Database) -> None:
    """A read SQLite plans with statistics if it has them: events has several indexes to choose from."""
    with database.read() as connection:
        connection.exec_driver_sql("SELECT id FROM events WHERE tenant_id = 'acme' AND object_id = 'pay_1'").all()


def test_sqlite_connections_optimize_when_they_close(tmp_path: Path) -> None:
    database = _database_with_rows(tmp_path / "close.db")
    _read_by_index(database)
    database.dispose()  # closes the pooled connections
    with Database(Settings(database_url=f"sqlite:///{tmp_path / 'close.db'}")).engine.connect() as connection:
        assert "events" in analyzed_tables(connection)


def test_sqlite_connections_optimize_now_and_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = _database_with_rows(tmp_path / "interval.db")
    _read_by_index(database)  # a new connection's first return starts its clock
    with database.engine.connect() as connection:
        assert "events" not in analyzed_tables(connection)
        connection.rollback()
    monkeypatch.setattr(statistics, "SQLITE_OPTIMIZE_INTERVAL_SECONDS", 0)
    _read_by_index(database)  # returned to the pool: optimized
    with database.engine.connect() as connection:
        assert "events" in analyzed_tables(connection)
        connection.rollback()
    database.dispose()


def test_sqlite_optimize_does_not_wait_on_a_busy_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = _database_with_rows(tmp_path / "busy.db")
    _read_by_index(database)
    monkeypatch.setattr(statistics, "SQLITE_OPTIMIZE_INTERVAL_SECONDS", 0)
    writer = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # holds the write lock that ANALYZE needs
    try:
        started = time.monotonic()
        _read_by_index(database)  # its optimize gives up on the lock
        elapsed_s = time.monotonic() - started
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    # The connections' own busy timeout is 10 s; the optimize waits 0.1 s.
    assert elapsed_s < database.settings.idempotency_wait_ms / 1000 / 4
    with database.engine.connect() as connection:
        assert "events" not in analyzed_tables(connection)  # it tries again at the next interval
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == database.settings.idempotency_wait_ms
        connection.rollback()
    database.dispose()


def _tenants(connection: Connection, first: int, count: int) -> None:
    for n in range(first, first + count):
        connection.exec_driver_sql(f"INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ('t{n}', 'T', 1)")
    connection.commit()
    if connection.dialect.name == "postgresql":  # the counters a backend reports when idle, reported now
        connection.exec_driver_sql("SELECT pg_stat_force_next_flush()")
        connection.commit()


def test_the_worker_analyzes_what_grew_while_autovacuum_is_off(empty_database: Database) -> None:
    """Without autovacuum nothing replaces a plan a connection made while the tables were small;
    the worker's `analyze_grown` gathers the statistics of each table changed by more than
    autovacuum's threshold since its last analysis (PostgreSQL; SQLite keeps its own)."""
    migrate.upgrade(empty_database)
    with empty_database.engine.connect() as connection:
        if not statistics.autovacuum_is_off(connection):
            assert statistics.analyze_grown(connection) == []  # autovacuum's to do, or SQLite's
            return
        _tenants(connection, 0, statistics.POSTGRES_ANALYZE_ROWS_MIN + 1)
        connection.execute(text(_EVENT))  # one row: under the threshold
        connection.commit()
        _tenants(connection, 1000, 0)
        # The migrations' own counts (alembic_version's 50-odd updates) may be reported by then.
        first = statistics.analyze_grown(connection)
        assert "tenants" in first and set(first) <= {"tenants", "alembic_version"}, first
        assert "tenants" not in statistics.analyze_grown(connection)  # not grown since
        _tenants(connection, 100, statistics.POSTGRES_ANALYZE_ROWS_MIN)  # 50 + a tenth of 51: not yet
        assert "tenants" not in statistics.analyze_grown(connection)
        _tenants(connection, 200, 10)
        assert "tenants" in statistics.analyze_grown(connection)
        assert "events" not in analyzed_tables(connection)


def test_one_worker_at_a_time_gathers_the_statistics(empty_database: Database) -> None:
    if not empty_database.is_postgres:
        pytest.skip("PostgreSQL's advisory lock; SQLite's connections optimize themselves")
    migrate.upgrade(empty_database)
    with empty_database.engine.connect() as connection, empty_database.engine.connect() as other:
        if not statistics.autovacuum_is_off(connection):
            pytest.skip("autovacuum is on: nothing for a worker to gather")
        _tenants(connection, 0, statistics.POSTGRES_ANALYZE_ROWS_MIN + 1)
        other.exec_driver_sql(f"SELECT pg_advisory_lock({statistics._ANALYZE_LOCK})")
        assert statistics.analyze_grown(connection) == []  # another worker is at it
        other.exec_driver_sql(f"SELECT pg_advisory_unlock({statistics._ANALYZE_LOCK})")
        assert "tenants" in statistics.analyze_grown(connection)
