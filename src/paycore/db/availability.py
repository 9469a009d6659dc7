"""When the database cannot be reached (docs/runbooks/operations.md, "The database
went away"): the one place that says which driver errors mean that, the two errors they
become, and each process's view of an outage.

- `DatabaseUnavailable`: the server could not be reached, or dropped the connection, before
  anything was committed (connection refused; the database refusing connections; a backend
  terminated by an administrator, a shutdown or a crash; a server in recovery or read-only;
  the pool empty past its bound while this process already knows the server is gone).
  Nothing was done: the client retries with the same key.
- `CommitOutcomeUnknown`: the connection was lost while its COMMIT was on the wire (or, on an
  autocommit connection, during a call that commits by itself): the transaction may or may
  not have committed. The client retries with the same Idempotency-Key and gets the one true
  result: the key is written in the same transaction as the effect (ADR 0004), so either both
  committed (the retry replays) or neither did (the retry executes).

Anything else, a lock timeout or a deadlock included, is not an outage: `classify` says None.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Final, cast

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

# Server answers that mean "not now, and not because of this request" (SQLSTATE, PostgreSQL
# appendix A): the backend was ended (admin_shutdown, crash_shutdown, idle_session_timeout),
# the server refuses connections (cannot_connect_now: starting up, in recovery;
# too_many_connections), or it is read-only (a standby, or default_transaction_read_only).
_UNAVAILABLE_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03", "57P05", "53300", "25006"})
_CONNECTION_EXCEPTION_CLASS: Final = "08"  # connection_exception and its subclasses


class DatabaseUnavailable(Exception):
    """The database could not be reached; nothing this request asked for was committed."""

    commit_outcome_unknown = False


class CommitOutcomeUnknown(DatabaseUnavailable):
    """The connection was lost during COMMIT: the transaction may or may not have committed."""

    commit_outcome_unknown = True


def unreachable(error: BaseException) -> bool:
    """True when a driver error (or SQLAlchemy's wrapper of one) says the server is gone."""
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:  # SQLAlchemy's dialect saw a disconnect
            return True
        return unreachable(error.orig) if error.orig is not None else False
    # psycopg is loaded by whoever raised its error: a process on SQLite never imports it
    # (~0.07 s of every start).
    driver = sys.modules.get("psycopg")
    if driver is None or not isinstance(error, driver.Error):
        return False  # SQLite has no server to lose; its errors are answered as they are
    sqlstate = cast("psycopg.Error", error).sqlstate
    if sqlstate is None:
        # No server answer at all: connection refused or failed, lost mid-request, or closed.
        return isinstance(error, driver.OperationalError | driver.InterfaceError)
    return sqlstate in _UNAVAILABLE_SQLSTATES or sqlstate.startswith(_CONNECTION_EXCEPTION_CLASS)


def classify(
    error: BaseException, *, during_commit: bool = False, outage: Outage | None = None
) -> DatabaseUnavailable | None:
    """The error `error` is answered with, or None when it is not an outage.

    `during_commit`: the error came from COMMIT (or a call that commits itself), so the
    outcome is unknown. A pool that stayed empty past its bound is an outage only while
    `outage` says the server is already known to be gone; otherwise it is a busy database."""
    if isinstance(error, DatabaseUnavailable):
        return error
    if isinstance(error, PoolTimeout):
        if outage is not None and outage.ongoing:
            return DatabaseUnavailable("no database connection could be had: the database is unavailable")
        return None
    if not unreachable(error):
        return None
    reason = describe(error)
    if during_commit:
        return CommitOutcomeUnknown(f"the connection to the database was lost during COMMIT: {reason}")
    return DatabaseUnavailable(f"the database cannot be reached: {reason}")


def describe(error: BaseException) -> str:
    """The driver's first line, for a log line (never parameters: those may hold anything)."""
    original = error.orig if isinstance(error, DBAPIError) else error
    lines = str(original).strip().splitlines()
    return lines[0][:200] if lines else type(original).__name__


class Outage:
    """One process's view of whether its database is reachable, for one line when an outage
    begins and one when it ends (event `database_unavailable`, `state` began/ended), never one
    per failed attempt. Every caller reports; only a change of state is logged. The fast path
    (`reachable` while no outage is known) is one attribute read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._failures = 0

    @property
    def ongoing(self) -> bool:
        return self._down_since is not None

    def unreachable(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        log.error(
            "the database is unavailable: %s",
            describe(error),
            extra={"event": "database_unavailable", "state": "began", "reason": describe(error)},
        )

    def reachable(self) -> None:
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is None:
                return
            outage_ms = int((time.monotonic() - self._down_since) * 1000)
            failures, self._down_since, self._failures = self._failures, None, 0
        log.warning(
            "the database is reachable again after %d ms",
            outage_ms,
            extra={
                "event": "database_unavailable",
                "state": "ended",
                "outage_ms": outage_ms,
                "failures": failures,
            },
        )
