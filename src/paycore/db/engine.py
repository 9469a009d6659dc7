"""One `Database` per process: an engine plus the transaction discipline.

SQLite (embedded default): WAL, synchronous=FULL, foreign keys on, a busy timeout, and
write transactions that take the write lock when they begin (`BEGIN IMMEDIATE`), so two
writers never discover their conflict half-way through. PostgreSQL: psycopg 3, READ
COMMITTED, row locks and unique constraints do the coordination; lock waits and statements
are bounded by server-side timeouts set on every connection. How each engine is made (its
connections' settings, the pool) is `paycore.db.engines`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from paycore.config import Settings
from paycore.db import driver
from paycore.db.availability import DatabaseUnavailable, Outage, classify
from paycore.db.engines import is_sqlite_memory, make_postgres_engine, make_sqlite_engine
from paycore.db.event_loop import LoopRunner
from paycore.db.group_commit import GroupCommitter, GroupTimeout
from paycore.kit import logs
from paycore.kit.threads import run_blocking

T = TypeVar("T")
log = logging.getLogger(__name__)
# What `after_commit` defers, for the work `Database.transaction` is running in this context.
_AFTER_COMMIT: ContextVar[list[Callable[[], None]] | None] = ContextVar("paycore_after_commit", default=None)


def after_commit(action: Callable[[], None]) -> None:
    """Run `action` once the transaction this is called in has committed, never if it rolls
    back, and once only if it is retried (a deadlock retry, a SQLite group run again). For what
    must not claim a change that did not happen, e.g. a log line saying an item is in doubt.
    Outside `Database.transaction` (or `transaction_async`) it runs at once."""
    pending = _AFTER_COMMIT.get()
    if pending is None:
        action()
    else:
        pending.append(action)


_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
_LOCK_TIMEOUT_SQLSTATE = "55P03"
_BACKOFF_MS_MAX = 200
# A transaction that found its pooled connection dead (the server ended it while it sat in the
# pool: a restart, a failover, pg_terminate_backend) is run again once on a new connection:
# nothing was committed on the dead one. A second loss is an outage, answered as such.
_STALE_CONNECTION_RETRIES_MAX = 1


class DatabaseBusy(Exception):
    """A lock could not be had within its bound (SQLite busy timeout, PostgreSQL lock_timeout)."""


def _sqlstate(error: DBAPIError) -> str | None:
    return getattr(error.orig, "sqlstate", None)


def is_lock_timeout(error: BaseException) -> bool:
    if isinstance(error, DBAPIError):
        if _sqlstate(error) == _LOCK_TIMEOUT_SQLSTATE:
            return True
        if isinstance(error, OperationalError) and "database is locked" in str(error.orig):
            return True
    return False


@contextmanager
def savepoint(connection: Connection) -> Iterator[None]:
    """A savepoint in the transaction `connection` is in: if the block raises, what it wrote is
    undone (and what it deferred with `after_commit` dropped), the transaction goes on, and the
    error is raised on; if it returns, its writes are kept."""
    pending = _AFTER_COMMIT.get()
    deferred = 0 if pending is None else len(pending)
    try:
        with connection.begin_nested():
            yield
    except BaseException:
        if pending is not None:
            del pending[deferred:]
        raise


def is_database_trouble(error: BaseException) -> bool:
    """True when `error` says the database, not the work it ran, is at fault: it cannot be
    reached (`availability.classify`), it is busy (a lock or a connection not had within its
    bound), or its operation failed (the driver's `OperationalError`: a deadlock or
    serialization failure, which `Database.transaction` runs again whole, a statement timeout,
    a disk error). Anything else a piece of work raises (a domain error, a constraint or a
    trigger refusing its write, a programmer's error) is that work's own."""
    if isinstance(error, DatabaseUnavailable | DatabaseBusy | PoolTimeout | GroupTimeout | OperationalError):
        return True
    if classify(error) is not None or is_lock_timeout(error):
        return True
    return isinstance(error, DBAPIError) and _sqlstate(error) in _RETRYABLE_SQLSTATES


class Database:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # SQLite only: this process's write transactions queue here and commit in groups
        # (paycore.db.group_commit). Scheduling, not correctness: SQLite's own write lock,
        # taken by BEGIN IMMEDIATE, still serialises every process. Without a queue, waiting
        # writers sleep in SQLite's busy handler, which backs off in steps of up to 100 ms.
        self.write_groups = GroupCommitter(self._sqlite_transaction)
        # SQLite only: `peek`'s connections, one per thread that peeks.
        self._peekers = threading.local()
        self._peekers_lock = threading.Lock()
        self._all_peekers: list[Any] = []
        # Whether the server is known to be unreachable: one log line as an outage begins and
        # one as it ends, and a pool timeout during one is an outage, not a busy database.
        self.outage = Outage()
        # What else holds connections of this database and closes them with it.
        self.on_dispose: list[Callable[[], None]] = []
        url = settings.database_url
        # An in-memory database lives in its one connection: a peek there goes through it.
        self._peeks_on_driver = url.startswith("sqlite") and not is_sqlite_memory(url)
        if url.startswith("sqlite"):
            self.dialect = "sqlite"
            self.engine = make_sqlite_engine(settings)
        elif url.startswith("postgresql"):
            self.dialect = "postgresql"
            self.engine = make_postgres_engine(settings)
        else:
            raise SystemExit(f"unsupported PAYCORE_DATABASE_URL {url!r}: use sqlite:/// or postgresql+psycopg://")

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    async def transaction_async(self, work: Callable[[Connection], T]) -> T:
        """`transaction` for a caller on an event loop, which must not block (ADR 0012).

        On SQLite `work` joins this process's group commit queue; whoever leads it (the
        writer thread when no request thread does) begins and commits the group, and runs
        the statements of a group of this loop's calls on this loop (`paycore.db.event_loop`
        says why). The caller awaits the group's COMMIT. Never call `transaction` itself from
        the loop's thread: a leader may be waiting for the loop.

        On PostgreSQL `transaction` runs on a worker thread, as FastAPI runs a sync endpoint,
        with the same retries (a data-plane phase's one call needs none: `db/loop_calls.py`)."""
        if self.dialect != "sqlite":
            return await run_blocking(self.transaction, work)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def on_done(call: Any) -> None:  # on the leading thread
            loop.call_soon_threadsafe(_settle, future, call)

        wait_s = self.settings.idempotency_wait_ms / 1000
        actions: list[Callable[[], None]] = []
        self.write_groups.submit(_in_callers_context(work, actions), wait_s, on_done, LoopRunner(loop))
        done = await future
        try:
            result = done.outcome()
            _run_all(actions)
            return result  # type: ignore[no-any-return]
        except (GroupTimeout, PoolTimeout, DBAPIError) as error:
            busy = _as_busy(error)
            if busy is None:
                raise
            raise busy from error

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one write transaction; retry the whole of it on a deadlock or
        serialization failure (bounded), so `work` must be free of side effects outside the
        database. Commits when `work` returns, rolls back when it raises."""
        attempts_max = self.settings.transaction_attempts_max
        actions: list[Callable[[], None]] = []
        stale_retries = 0
        for attempt in range(1, attempts_max + 1):
            try:
                result = self._attempt(_in_callers_context(work, actions))
            except _StaleConnection as stale:
                if stale_retries >= _STALE_CONNECTION_RETRIES_MAX or attempt == attempts_max:
                    raise self._unreachable(stale.unavailable, stale.__cause__) from stale.__cause__
                stale_retries += 1
                log.info("transaction retry %d on a new connection: %s", attempt, stale.unavailable)
            except (PoolTimeout, GroupTimeout, DBAPIError) as error:
                busy = _as_busy(error)
                if busy is not None:
                    raise busy from error
                assert isinstance(error, DBAPIError), "the timeouts are always busy"
                if _sqlstate(error) not in _RETRYABLE_SQLSTATES or attempt == attempts_max:
                    raise
                pause_ms = random.randint(1, min(_BACKOFF_MS_MAX, 5 * 2**attempt))
                log.info("transaction retry %d after %s", attempt, _sqlstate(error))
                time.sleep(pause_ms / 1000)
            else:
                self.outage.reachable()
                _run_all(actions)  # committed: what the work deferred happens now, once
                return result
        raise AssertionError("unreachable: the loop returns or raises")

    def _attempt(self, work: Callable[[Connection], T]) -> T:
        """One try. On PostgreSQL a lost server comes out as `DatabaseUnavailable` (it could not
        be reached), `_StaleConnection` (a pooled connection was found dead before COMMIT) or
        `CommitOutcomeUnknown` (lost during COMMIT)."""
        if self.dialect == "sqlite":
            return self.write_groups.run(work, wait_s=self.settings.idempotency_wait_ms / 1000)
        stage = "connect"
        try:
            with self.engine.connect() as connection:
                stage = "work"
                with connection.begin():
                    result = work(connection)
                    stage = "commit"  # leaving the block commits
            return result
        except (PoolTimeout, DBAPIError) as error:
            unavailable = classify(error, during_commit=stage == "commit", outage=self.outage)
            if unavailable is None:
                raise
            if stage == "work":
                raise _StaleConnection(unavailable) from error
            raise self._unreachable(unavailable, error) from error

    def _unreachable(self, unavailable: DatabaseUnavailable, cause: BaseException | None) -> DatabaseUnavailable:
        """`unavailable`, once this process's outage has heard of it (its first line)."""
        self.outage.unreachable(cause or unavailable)
        return unavailable

    @contextmanager
    def _sqlite_transaction(self) -> Iterator[Connection]:
        with self.engine.connect() as connection, connection.begin():
            yield connection

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """PostgreSQL only: a connection on which each statement is its own transaction, for
        a server-side function that writes and commits in one call (ADR 0011). No retry
        here: the caller decides what a failed call means."""
        assert self.dialect == "postgresql", self.dialect
        connected = False
        try:
            with self._connect() as connection:
                connected = True
                # Attributes of the driver's connection, no round trip; the pool resets them.
                connection.execution_options(isolation_level="AUTOCOMMIT")
                yield connection
        except DBAPIError as error:
            # Any statement here may have committed itself before the connection was lost.
            unavailable = classify(error, during_commit=connected, outage=self.outage)
            if unavailable is None:
                raise
            raise self._unreachable(unavailable, error) from error
        self.outage.reachable()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (deferred on SQLite, so it never takes the write lock)."""
        try:
            with self._connect() as connection:
                connection.execution_options(paycore_readonly=True)
                with connection.begin():
                    yield connection
        except DBAPIError as error:
            unavailable = classify(error, outage=self.outage)  # a read commits nothing
            if unavailable is None:
                raise
            raise self._unreachable(unavailable, error) from error
        self.outage.reachable()

    def peek(self, sql: driver.Statement, params: driver.Params) -> list[tuple[Any, ...]]:
        """One read for a check made on every request (ADR 0012), outside any transaction.

        On a SQLite file it runs on a driver connection of the calling thread's own, in
        autocommit: the statement is its own read transaction and sees every committed write,
        without a pool checkout, BEGIN or COMMIT (about 3 us against 26 us through `read()`).
        Elsewhere it runs in `read()`."""
        if not self._peeks_on_driver:
            with self.read() as connection:
                return driver.fetch(connection, sql, params)
        peeker: Any = getattr(self._peekers, "connection", None)
        if peeker is None:
            peeker = self._new_peeker()
        try:
            return list(peeker.execute(sql.sqlite, params).fetchall())
        except sqlite3.OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                raise DatabaseBusy(str(error)) from error
            raise

    def _new_peeker(self) -> Any:
        arguments, options = self.engine.dialect.create_connect_args(self.engine.url)
        options.update(isolation_level=None, check_same_thread=False)  # used by its own thread only
        peeker = sqlite3.connect(*arguments, **options)  # type: ignore[call-overload]
        peeker.execute(f"PRAGMA busy_timeout={int(self.settings.idempotency_wait_ms)}")
        peeker.execute("PRAGMA query_only=ON")
        self._peekers.connection = peeker
        with self._peekers_lock:
            self._all_peekers.append(peeker)
        return peeker

    def _connect(self) -> Connection:
        """A pooled connection; waiting for one is bounded like every other wait."""
        try:
            return self.engine.connect()
        except PoolTimeout as error:
            raise no_connection_in_time(error, self.outage) from error

    def dispose(self) -> None:
        for close in self.on_dispose:  # the event loops' connections (`db/loop_calls.py`)
            close()
        self.write_groups.close()
        with self._peekers_lock:
            peekers, self._all_peekers = self._all_peekers, []
            self._peekers = threading.local()
        for peeker in peekers:
            peeker.close()
        self.engine.dispose()


def no_connection_in_time(error: PoolTimeout, outage: Outage) -> DatabaseUnavailable | DatabaseBusy:
    """What a wait for a pooled connection past its bound is answered with (the engine's pool
    and the event loop's, `db/loop_calls.py`): an outage while one is known, else a busy database."""
    unavailable = classify(error, outage=outage)
    return unavailable if unavailable is not None else DatabaseBusy("no database connection became free in time")


class _StaleConnection(Exception):
    """A connection was found dead before COMMIT: nothing was committed, try a new one."""

    def __init__(self, unavailable: DatabaseUnavailable) -> None:
        super().__init__(str(unavailable))
        self.unavailable = unavailable


def _run_all(actions: list[Callable[[], None]]) -> None:
    for action in actions:
        try:
            action()
        except Exception:  # the transaction committed: a failing follow-up must not undo the answer
            log.exception("an action after a commit failed", extra={"event": "after_commit_failed"})


def _in_callers_context(
    work: Callable[[Connection], T], actions: list[Callable[[], None]]
) -> Callable[[Connection], T]:
    """`work` as its caller would run it, on whatever thread runs it: a SQLite group's leader
    (another request's thread, a worker's, or the writer thread) runs the work of every call in
    its group.
    - Under the caller's request id and worker id, none if the caller has none, so the audit
      events and log lines the work writes name the request (and worker) that asked for it,
      never the leader's.
    - With its `after_commit` actions collected into `actions`, afresh each time it runs (a
      group rolled back and run again runs each work again)."""
    request_id, worker_id = logs.request_id(), logs.worker_id()

    def work_in_context(connection: Connection) -> T:
        actions.clear()
        deferred = _AFTER_COMMIT.set(actions)
        named, worker = logs.set_request_id(request_id), logs.set_worker_id(worker_id)
        try:
            return work(connection)
        finally:
            logs.reset_worker_id(worker)
            logs.reset_request_id(named)
            _AFTER_COMMIT.reset(deferred)

    return work_in_context


def _as_busy(error: BaseException) -> DatabaseBusy | None:
    """The `DatabaseBusy` a wait past its bound is answered with; None for other errors."""
    if isinstance(error, PoolTimeout):
        return DatabaseBusy("no database connection became free in time")
    if isinstance(error, GroupTimeout):
        return DatabaseBusy(str(error))
    if is_lock_timeout(error):
        return DatabaseBusy(str(getattr(error, "orig", error)))
    return None


def _settle(future: asyncio.Future[Any], call: Any) -> None:
    if not future.cancelled():  # a cancelled caller's work still ran (or expired): nobody to tell
        future.set_result(call)
