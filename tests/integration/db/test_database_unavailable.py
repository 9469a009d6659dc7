"""`Database` on PostgreSQL while its database goes away and comes back (issue 29, item 1): a
lost server is `DatabaseUnavailable` from every entry point, never a raw driver error; a
connection lost during COMMIT is `CommitOutcomeUnknown`; the same `Database` serves again
once the server is back, without a restart; one log line as the outage begins, one as it ends."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from paycore.config import Settings
from paycore.db import driver
from paycore.db.availability import CommitOutcomeUnknown, DatabaseUnavailable
from paycore.db.engine import Database
from tests.support import databases
from tests.support.outage import allow_connections, database_away, refuse_connections, terminate_backend

pytestmark = pytest.mark.postgres

_ONE = driver.statement("SELECT 1")
_PID = driver.statement("SELECT pg_backend_pid()")
_POOL_SIZE = 3


@pytest.fixture
def postgres_url(postgres_databases: databases.PostgresDatabases) -> Iterator[str]:
    with databases.fresh_url("postgres", None, postgres_databases) as url:
        yield url


@pytest.fixture
def database(postgres_url: str) -> Iterator[Database]:
    found = Database(Settings(database_url=postgres_url, db_pool_size=_POOL_SIZE, idempotency_wait_ms=2000))
    yield found
    found.dispose()


def fill_the_pool(database: Database) -> None:
    """Every pooled connection opened and back in the pool, idle: what an outage then ends."""
    ready = threading.Barrier(_POOL_SIZE)

    def hold(connection: Connection) -> None:
        driver.fetch(connection, _ONE, ())
        ready.wait(timeout=10)

    threads = [threading.Thread(target=database.transaction, args=(hold,)) for _ in range(_POOL_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)


def one_of_each(database: Database) -> None:
    """A read, a peek, a transaction on the driver's statements, one through SQLAlchemy."""
    with database.read() as connection:
        assert connection.execute(text("SELECT 3")).scalar() == 3
    assert database.peek(_ONE, ()) == [(1,)]
    assert database.transaction(lambda connection: driver.fetch(connection, _ONE, ())) == [(1,)]
    assert database.transaction(lambda connection: connection.execute(text("SELECT 2")).scalar()) == 2


def test_every_entry_point_answers_database_unavailable_while_the_database_is_away(
    database: Database, postgres_url: str
) -> None:
    fill_the_pool(database)
    with database_away(postgres_url):
        with pytest.raises(DatabaseUnavailable) as raised:
            database.transaction(lambda connection: driver.fetch(connection, _ONE, ()))
        assert not raised.value.commit_outcome_unknown
        with pytest.raises(DatabaseUnavailable):
            database.transaction(lambda connection: connection.execute(text("SELECT 1")))
        with pytest.raises(DatabaseUnavailable), database.read() as connection:
            connection.execute(text("SELECT 1"))
        with pytest.raises(DatabaseUnavailable):
            database.peek(_ONE, ())
        with pytest.raises(DatabaseUnavailable), database.autocommit() as connection:
            driver.fetch(connection, _ONE, ())
        assert database.outage.ongoing
    one_of_each(database)  # the same Database, no restart
    assert not database.outage.ongoing


def test_connections_ended_while_idle_in_the_pool_are_replaced_without_an_error(
    database: Database, postgres_url: str
) -> None:
    """The server came back before anyone noticed it had gone: every pooled connection is dead.
    A connection the server closed is noticed as it leaves the pool (no round trip) and replaced,
    so even a read, which cannot be run again, never sees it."""
    fill_the_pool(database)
    assert refuse_connections(postgres_url) >= _POOL_SIZE
    allow_connections(postgres_url)
    for _ in range(_POOL_SIZE + 1):
        one_of_each(database)
    assert not database.outage.ongoing


def test_a_connection_lost_during_commit_is_commit_outcome_unknown(database: Database) -> None:
    ran: list[int] = []

    def work(connection: Connection) -> None:
        [(pid,)] = driver.fetch(connection, _PID, ())
        ran.append(pid)
        terminate_backend(pid)  # the next thing this connection sends is COMMIT

    with pytest.raises(CommitOutcomeUnknown) as raised:
        database.transaction(work)
    assert raised.value.commit_outcome_unknown
    assert len(ran) == 1, "a transaction whose COMMIT may have happened is never run again"
    one_of_each(database)


def test_an_outage_is_logged_once_as_it_begins_and_once_as_it_ends(
    database: Database, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    one_of_each(database)
    with database_away(postgres_url):
        for _ in range(10):
            with pytest.raises(DatabaseUnavailable):
                database.transaction(lambda connection: driver.fetch(connection, _ONE, ()))
            with pytest.raises(DatabaseUnavailable), database.read() as connection:
                connection.execute(text("SELECT 1"))
    one_of_each(database)
    one_of_each(database)
    lines = [record for record in caplog.records if getattr(record, "event", None) == "database_unavailable"]
    assert [line.state for line in lines] == ["began", "ended"]  # type: ignore[attr-defined]
    assert lines[1].failures == 20  # type: ignore[attr-defined]


def test_a_connection_the_driver_finds_lost_takes_every_older_pooled_connection_along(database: Database) -> None:
    """A server that dropped one connection dropped them all, even those idle in the pool whose
    end nobody has seen yet: each is replaced as it next leaves the pool, not found dead by the
    statement after (SQLAlchemy's own handling of a disconnect; the driver's statements too)."""
    before = _pooled_pids(database)
    with database.engine.connect() as lost:
        [(pid,)] = driver.fetch(lost, _PID, ())
        terminate_backend(pid)
        with pytest.raises(DBAPIError) as raised:
            driver.fetch(lost, _ONE, ())
        assert raised.value.connection_invalidated
    assert not _pooled_pids(database) & before, "a connection opened before the loss was handed out"


def _pooled_pids(database: Database) -> set[int]:
    """The server processes of the pool's connections, every one checked out at once."""
    with ExitStack() as stack:
        connections = [stack.enter_context(database.engine.connect()) for _ in range(_POOL_SIZE)]
        return {driver.fetch(connection, _PID, ())[0][0] for connection in connections}
