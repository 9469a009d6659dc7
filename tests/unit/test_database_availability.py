"""Which driver errors mean "the database cannot be reached" (issue 29, item 1): one place,
`paycore.db.availability.classify`, decides for every caller (API, idempotency, workers)."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import errors as pg
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from paycore.db.availability import CommitOutcomeUnknown, DatabaseUnavailable, Outage, classify


def wrapped(error: Exception, *, invalidated: bool = False) -> DBAPIError:
    """The error as SQLAlchemy raises it, around the driver's."""
    found = DBAPIError.instance("SELECT 1", (), error, psycopg.Error, connection_invalidated=invalidated)
    assert isinstance(found, DBAPIError)
    return found


UNREACHABLE = [
    pytest.param(psycopg.OperationalError("connection failed: Connection refused"), id="connection-refused"),
    pytest.param(
        psycopg.OperationalError('connection failed: FATAL: database "x" is not currently accepting connections'),
        id="not-accepting-connections",
    ),
    pytest.param(psycopg.OperationalError("the connection is closed"), id="connection-closed"),
    pytest.param(psycopg.OperationalError("consuming input failed: server closed the connection"), id="lost"),
    pytest.param(psycopg.InterfaceError("the connection is lost"), id="interface-lost"),
    pytest.param(pg.AdminShutdown("terminating connection due to administrator command"), id="57P01"),
    pytest.param(pg.CrashShutdown("terminating connection because of crash"), id="57P02"),
    pytest.param(pg.CannotConnectNow("the database system is in recovery mode"), id="57P03"),
    pytest.param(pg.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"), id="25006"),
    pytest.param(pg.TooManyConnections("sorry, too many clients already"), id="53300"),
    pytest.param(pg.ConnectionFailure("connection failure"), id="08006"),
]

NOT_AN_OUTAGE = [
    pytest.param(pg.LockNotAvailable("canceling statement due to lock timeout"), id="lock-timeout"),
    pytest.param(pg.DeadlockDetected("deadlock detected"), id="deadlock"),
    pytest.param(pg.SerializationFailure("could not serialize access"), id="serialization"),
    pytest.param(pg.QueryCanceled("canceling statement due to statement timeout"), id="statement-timeout"),
    pytest.param(pg.UniqueViolation("duplicate key value"), id="unique-violation"),
    pytest.param(pg.CheckViolation("violates check constraint"), id="check-violation"),
]


@pytest.mark.parametrize("error", UNREACHABLE)
def test_a_lost_server_is_database_unavailable_raw_or_wrapped(error: Exception) -> None:
    for candidate in (error, wrapped(error)):
        found = classify(candidate)
        assert type(found) is DatabaseUnavailable, candidate
        assert not found.commit_outcome_unknown


@pytest.mark.parametrize("error", UNREACHABLE)
def test_a_lost_server_during_commit_is_commit_outcome_unknown(error: Exception) -> None:
    found = classify(wrapped(error), during_commit=True)
    assert isinstance(found, CommitOutcomeUnknown)
    assert found.commit_outcome_unknown


@pytest.mark.parametrize("error", NOT_AN_OUTAGE)
def test_other_server_answers_are_not_an_outage(error: Exception) -> None:
    assert classify(error) is None
    assert classify(wrapped(error)) is None
    assert classify(wrapped(error), during_commit=True) is None  # e.g. a deferred trigger at COMMIT


def test_sqlalchemy_seeing_a_disconnect_is_an_outage_whatever_the_driver_said() -> None:
    assert isinstance(classify(wrapped(psycopg.DatabaseError("odd"), invalidated=True)), DatabaseUnavailable)
    assert classify(wrapped(psycopg.DatabaseError("odd"))) is None


def test_sqlite_errors_are_never_an_outage() -> None:
    import sqlite3

    for error in (sqlite3.OperationalError("database is locked"), sqlite3.OperationalError("disk I/O error")):
        assert classify(OperationalError("BEGIN", (), error)) is None
    assert classify(IntegrityError("INSERT", (), sqlite3.IntegrityError("UNIQUE constraint failed"))) is None


def test_an_empty_pool_is_an_outage_only_while_one_is_known() -> None:
    outage = Outage()
    timeout = PoolTimeout("QueuePool limit of size 2 overflow 0 reached")
    assert classify(timeout) is None
    assert classify(timeout, outage=outage) is None  # a busy database (503 database_busy)
    outage.unreachable(psycopg.OperationalError("connection failed: Connection refused"))
    assert isinstance(classify(timeout, outage=outage), DatabaseUnavailable)
    outage.reachable()
    assert classify(timeout, outage=outage) is None


def test_an_outage_is_two_log_lines_however_many_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    outage = Outage()
    outage.reachable()  # nothing to say while the database is up
    for _ in range(50):
        outage.unreachable(psycopg.OperationalError("connection failed: Connection refused\n\tIs the server running?"))
    assert outage.ongoing
    for _ in range(5):
        outage.reachable()
    assert not outage.ongoing
    lines = [record for record in caplog.records if getattr(record, "event", None) == "database_unavailable"]
    assert [line.state for line in lines] == ["began", "ended"]
    assert lines[0].reason == "connection failed: Connection refused"
    assert lines[1].failures == 50
    assert isinstance(lines[1].outage_ms, int)
