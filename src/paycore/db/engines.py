"""The two engines a `Database` runs on (`paycore.db.engine`), each with its connections'
settings: SQLite's pragmas and the BEGIN each transaction starts with, PostgreSQL's server-side
timeouts and the check that no pooled connection the server closed is handed out.
"""

from __future__ import annotations

import select
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import StaticPool

from paycore.config import Settings
from paycore.db import commit_errors, driver, statistics

_BEGIN_DEFERRED = driver.statement("BEGIN")
_BEGIN_IMMEDIATE = driver.statement("BEGIN IMMEDIATE")


def pool_timeout_s(settings: Settings) -> float:
    # Waiting for a pooled connection is waiting too: bounded like every other lock wait, so a
    # burst of duplicates behind a slow request is answered within the same bound. The engine's
    # pool and the event loop's (`paycore.db.loop_calls`).
    return settings.idempotency_wait_ms / 1000


def is_sqlite_memory(database_url: str) -> bool:
    """`sqlite://` or `sqlite:///:memory:`: a database that lives in one connection."""
    return database_url.startswith("sqlite") and make_url(database_url).database in (None, "", ":memory:")


def make_sqlite_engine(settings: Settings) -> Engine:
    memory = is_sqlite_memory(settings.database_url)
    if memory:
        # One connection for every checkout, or each would see its own empty database. For
        # one thread at a time (the replay entry point); file databases are for concurrency.
        engine = create_engine(settings.database_url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        engine = create_engine(
            settings.database_url, pool_size=settings.db_pool_size, pool_timeout=pool_timeout_s(settings)
        )
    busy_timeout_ms = settings.idempotency_wait_ms

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        if not memory:  # an in-memory database has no file to journal or sync
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        readonly = connection.get_execution_options().get("paycore_readonly", False)
        # On the driver: this runs for every transaction (paycore.db.driver says why).
        driver.execute(connection, _BEGIN_DEFERRED if readonly else _BEGIN_IMMEDIATE, ())

    statistics.keep_sqlite_statistics(engine, busy_timeout_ms)  # PRAGMA optimize now and then
    return engine


# On a Citus coordinator (ADR 0031): at most one connection per worker for a statement that
# reads every shard (the rounds' reads of the tenants with due work, `paycore ledger verify`),
# the one each session keeps cached (`citus.max_cached_conns_per_worker`, 1). Citus's default
# (16) opened up to 16 connections per worker for such a read and closed all but one at its
# end: a fork, a TLS handshake and a cold catalogue cache each, about 33 a second from an idle
# `paycore serve --dev` (docs/benchmarks.md). Its shards on a worker are then read one after
# another on that connection, the workers still in parallel. On PostgreSQL without Citus the
# setting is a placeholder nothing reads.
CITUS_EXECUTOR_POOL_SIZE = 1


POOL_RECYCLE_S = 3600  # a pooled connection is replaced once this old (the engine's and the loop's)


def postgres_connect_args(settings: Settings) -> dict[str, Any]:
    """What every PostgreSQL connection of a process is opened with beyond its URL: the
    server-side timeouts, the Citus executor's bound, the application's name and the connect
    timeout. The one home of them for the engine's pool and the event loop's
    (`paycore.db.loop_calls`)."""
    options = " ".join(
        [
            f"-c lock_timeout={settings.idempotency_wait_ms}",
            f"-c statement_timeout={settings.statement_timeout_ms}",
            f"-c idle_in_transaction_session_timeout={settings.statement_timeout_ms * 2}",
            f"-c citus.max_adaptive_executor_pool_size={CITUS_EXECUTOR_POOL_SIZE}",
        ]
    )
    return {
        "options": options,
        "application_name": "paycore",
        # A server that does not answer at all (a dead host) is an outage after this bound,
        # not a request hanging for the kernel's TCP timeouts. libpq counts whole seconds.
        "connect_timeout": max(2, -(-settings.idempotency_wait_ms // 1000)),
    }


def make_postgres_engine(settings: Settings) -> Engine:
    engine = create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout_s(settings),
        # No pre-ping: it costs a round trip on every checkout. A connection the server closed
        # is replaced at checkout (`_refuse_if_closed_by_server`); one that died silently fails
        # its first statement, and it and every older connection of the pool are discarded
        # (SQLAlchemy's disconnect handling, and paycore.db.driver's); a transaction is then run
        # again once on a new connection, anything else is answered 503 `database_unavailable`
        # (paycore.db.availability): nothing was committed.
        pool_recycle=POOL_RECYCLE_S,
        connect_args=postgres_connect_args(settings),
    )
    event.listen(engine, "checkout", _refuse_if_closed_by_server)
    commit_errors.install(engine)  # a Citus worker's error at COMMIT raised as its own
    return engine


def _refuse_if_closed_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A pooled connection the server closed while it sat idle (a restart, a failover,
    pg_terminate_backend) is never handed out: the pool replaces it (SQLAlchemy's answer to a
    `DisconnectionError` raised here). An idle connection has nothing to read unless the server
    said goodbye, so this costs one poll of its socket, not a round trip like a pre-ping.
    A server that vanished without a word (a dead host) is found by the first statement."""
    if closed_by_server(dbapi_connection):
        raise DisconnectionError("the connection is closed, or the server closed it while it was idle in the pool")


def closed_by_server(dbapi_connection: Any) -> bool:
    """Whether an idle connection was closed, or said goodbye (`_refuse_if_closed_by_server`'s
    rule, for the loop's pool too)."""
    return bool(dbapi_connection.closed) or _has_input(dbapi_connection.fileno())


def _has_input(fd: int) -> bool:
    """Whether `fd` can be read (or was hung up) now, without waiting. poll(), not select():
    select() cannot watch a descriptor numbered past 1023."""
    if not hasattr(select, "poll"):
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))


def connections_max(connection: Connection) -> int:
    """PostgreSQL's `max_connections`: what every process's pool shares (ADR 0028)."""
    assert connection.dialect.name == "postgresql", connection.dialect.name
    return int(connection.exec_driver_sql("SHOW max_connections").scalar_one())
