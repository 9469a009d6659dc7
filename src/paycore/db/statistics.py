"""The planners' statistics: gathered after migrating, kept current while running.

The money path's statements are written so that their plan does not depend on statistics
(each searches a whole key or one object's rows, and the only index that does so is the one a
planner can use: tests/integration/plans/); the rest of paycore (the console, reports, lists)
still plans better with them, and so does any statement added later. So:

- **After migrating** (`migrate.upgrade`, when a migration ran: `paycore db upgrade`, and the
  first start of a process on a database behind): `ANALYZE` of every table that holds a row.
  An empty table is left alone. On PostgreSQL, statistics that say "empty" are worse than none:
  a table never analyzed is planned as at least ten pages, one analyzed empty as the few pages
  it has, and a plan made while it is small (a prepared statement's, a PL/pgSQL statement's, a
  foreign key check's generic plan, kept by its connection until the table's statistics change)
  reads the whole table, however large it grows (ADR 0027). SQLite's ANALYZE writes nothing for
  an empty table anyway.
- **SQLite while running**: `PRAGMA optimize`, as SQLite advises for connections that live
  long, on each pooled connection when it is returned to the pool at most once every
  `SQLITE_OPTIMIZE_INTERVAL_SECONDS`, and when it is closed. It analyzes a table the connection
  has read by an index when the table was never analyzed or has grown 25 times since (SQLite
  3.40's rule; 10 times from 3.46), so it runs ANALYZE a few times in a database's life and is
  otherwise a no-op. Each analysis reads at most `SQLITE_ANALYSIS_ROWS_MAX` rows per index
  (`PRAGMA analysis_limit`), and waits at most `SQLITE_OPTIMIZE_WAIT_MS` for the write lock
  (the statistics are a table): a busy writer makes it try again at the next interval.
- **PostgreSQL while running**: autovacuum's ANALYZE (on by default), which also replaces the
  plans every connection keeps for a table. `paycore db upgrade` warns when it is off
  (docs/operations.md); and while it is off, the worker does its part itself
  (`analyze_grown`, at most every `POSTGRES_ANALYZE_INTERVAL_SECONDS`): ANALYZE of each table
  changed since its last analysis by more than autovacuum's default threshold (50 rows and a
  tenth of the table), so that no connection keeps for ever a plan it made while the tables
  were small (a PL/pgSQL statement's generic plan is made again only when its tables'
  statistics change).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any, Final

from sqlalchemy import Connection, Engine, event, inspect

log = logging.getLogger(__name__)

SQLITE_ANALYSIS_ROWS_MAX: Final = 1000  # PRAGMA analysis_limit: rows read per index by an ANALYZE
SQLITE_OPTIMIZE_INTERVAL_SECONDS: Final = 600
SQLITE_OPTIMIZE_WAIT_MS: Final = 100
POSTGRES_ANALYZE_INTERVAL_SECONDS: Final = 60  # autovacuum_naptime's default
# autovacuum_analyze_threshold and autovacuum_analyze_scale_factor's defaults: a table is analyzed
# once more rows than this changed since its last analysis.
POSTGRES_ANALYZE_ROWS_MIN: Final = 50
POSTGRES_ANALYZE_SHARE: Final = "0.1"  # of the table's rows; a SQL literal, never a Python float
# Tables whose statistics one worker gathers at a time: the others find the lock taken and go on.
_ANALYZE_LOCK: Final = 0x7061_7963_6F72_6531  # "paycore1"
_OPTIMIZED_AT = "paycore_optimized_at"  # a pooled connection's last PRAGMA optimize (monotonic s)


def analyze(connection: Connection) -> list[str]:
    """ANALYZE every table of the database that holds a row, each committed at once (so that no
    writer waits on the next: SQLite's ANALYZE takes the write lock); the tables analyzed."""
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_ROWS_MAX}")
    names = sorted(inspect(connection).get_table_names())
    connection.rollback()
    analyzed = []
    for name in names:
        if _analyze_if_it_holds_a_row(connection, name):
            analyzed.append(name)
        connection.commit()
    return analyzed


def _analyze_if_it_holds_a_row(connection: Connection, name: str) -> bool:
    """ANALYZE of table `name` unless it is empty (statistics saying "empty" are worse than none)."""
    table = connection.dialect.identifier_preparer.quote(name)
    if connection.exec_driver_sql(f"SELECT 1 FROM {table} LIMIT 1").first() is None:
        return False
    connection.exec_driver_sql(f"ANALYZE {table}")
    return True


def autovacuum_is_off(connection: Connection) -> bool:
    """PostgreSQL: whether the server's autovacuum (and so its ANALYZE) is off."""
    return connection.dialect.name == "postgresql" and connection.exec_driver_sql("SHOW autovacuum").scalar() == "off"


# The tables of paycore's schema changed since their last analysis by more than autovacuum's
# default threshold (a table never analyzed: reltuples is -1).
_GROWN: Final = f"""
    SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
    WHERE s.schemaname = current_schema()
      AND s.n_mod_since_analyze > {POSTGRES_ANALYZE_ROWS_MIN} + {POSTGRES_ANALYZE_SHARE} * greatest(c.reltuples, 0)
    ORDER BY s.relname
"""


def analyze_grown(connection: Connection) -> list[str]:
    """PostgreSQL with autovacuum off: ANALYZE of each table of the schema grown past autovacuum's
    threshold since its last analysis and holding a row, each in a transaction of its own;
    the tables analyzed. Nothing with autovacuum on (it does this), on SQLite (`PRAGMA
    optimize`), or while another worker holds the lock."""
    if not autovacuum_is_off(connection):
        connection.rollback()
        return []
    connection.exec_driver_sql("SELECT pg_stat_clear_snapshot()")  # the counters as they are now
    names = list(connection.exec_driver_sql(_GROWN).scalars())
    connection.rollback()
    analyzed = []
    for name in names:
        if not connection.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({_ANALYZE_LOCK})").scalar():
            connection.rollback()
            break
        if _analyze_if_it_holds_a_row(connection, name):
            analyzed.append(name)
        connection.commit()
    return analyzed


def keep_sqlite_statistics(engine: Engine, busy_timeout_ms: int) -> None:
    """`PRAGMA optimize` on the engine's connections: now and then when one is returned to the
    pool, and when one is closed. `busy_timeout_ms`: the connections' own, put back after."""

    @event.listens_for(engine, "checkin")
    def _now_and_then(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is None:
            return  # invalidated: nothing to optimize on
        now = time.monotonic()
        last = record.info.setdefault(_OPTIMIZED_AT, now)  # a new connection has read nothing yet
        if now - last >= SQLITE_OPTIMIZE_INTERVAL_SECONDS:
            record.info[_OPTIMIZED_AT] = now
            optimize_sqlite(dbapi_connection, busy_timeout_ms)

    @event.listens_for(engine, "close")
    def _on_close(dbapi_connection: Any, record: Any) -> None:
        optimize_sqlite(dbapi_connection, busy_timeout_ms)


def optimize_sqlite(dbapi_connection: Any, busy_timeout_ms: int) -> None:
    """`PRAGMA optimize` on a SQLite driver connection outside any transaction, waiting at most
    `SQLITE_OPTIMIZE_WAIT_MS` for the write lock; a failure is logged, never raised (the
    statistics are an optimisation)."""
    try:
        if dbapi_connection.in_transaction:
            return
        dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_OPTIMIZE_WAIT_MS}")
        try:
            dbapi_connection.execute(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_ROWS_MAX}")
            dbapi_connection.execute("PRAGMA optimize")
        finally:
            dbapi_connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    except sqlite3.Error as error:
        log.debug("PRAGMA optimize did not run: %s", error)
