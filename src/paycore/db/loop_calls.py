"""PostgreSQL from the event loop, with no worker thread: a data-plane phase's one call (ADR 0026
decision 4) on a connection of the loop's own bounded pool of psycopg `AsyncConnection`s.

It serves what `Database.autocommit()` and `Database.read()` serve a worker thread, one
statement at a time: a call that commits itself (a phase's server function), or a read that
commits nothing (an API key's owner). Everything else about it is the engine's:

- **The connection** is opened as the engine's pool opens one: the URL read by the engine's
  own dialect (`create_connect_args`: host, port, database, user, the query's parameters, the
  adapters), `engines.postgres_connect_args` (the lock, statement and idle-in-transaction
  timeouts, the Citus executor's bound, the application's name, the connect timeout), psycopg's
  default prepared statements (prepared from a statement's sixth run on a connection), in
  autocommit as `autocommit()` sets it; replaced after `engines.POOL_RECYCLE_S`.
- **The pool**: at most `db_pool_size` connections for each event loop (one loop per API
  process, so a process opens at most twice its `db_pool_size`, the engine's and the loop's:
  `paycore serve --workers` warns from that figure); a wait for one bounded as the engine's
  (`engines.pool_timeout_s`) and answered as it is (`engine.no_connection_in_time`). An idle
  connection the server closed is never handed out (`engines.closed_by_server`: one poll of its
  socket), nor one opened before a connection of this database was last found lost, here or in
  the engine's pool (`lost_connections`, ADR 0007), which a loss here marks too.
- **Errors** come out as the driver's statements' do (`driver.wrapped_error`: SQLAlchemy's
  `DBAPIError` subclasses, the SQLSTATE on `.orig`), then as `autocommit()` and `read()` answer
  them (`availability.classify`): a lost connection during a call that commits itself is
  `CommitOutcomeUnknown` (ADR 0006: the phase's outcome is unknown, the payment is left to the
  resolver as on the thread), during a read `DatabaseUnavailable`; any other error is the
  caller's to read (a refusal, a lock timeout), by the same functions as on the thread.
- **Run to its end**: a cancelled request (the server shutting down) waits for its call
  (`kit.threads.run_to_end`), as a worker thread's call was never abandoned half-way.
- The statement observers (`db/observers.py`) see each statement under the engine.

A pool belongs to its loop (an asyncio connection cannot serve another). The pools of loops
that have closed (a test client's, one per request) are closed when the next loop makes its
own, and every pool by `Database.dispose`.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy.exc import TimeoutError as PoolTimeout

from paycore.db import driver, engines, lost_connections, observers
from paycore.db.availability import classify
from paycore.db.engine import Database, no_connection_in_time
from paycore.kit.threads import run_to_end

if TYPE_CHECKING:
    from psycopg import AsyncConnection

Rows = list[tuple[Any, ...]]


async def fetch(database: Database, sql: driver.Statement, params: driver.Params, *, commits: bool) -> Rows:
    """`sql`'s rows, run once from the event loop on a connection of the loop's pool, in
    autocommit. `commits`: the statement commits itself (a phase's call), so a connection lost
    during it leaves the outcome unknown; else it is a read."""
    assert database.is_postgres, database.dialect
    return await run_to_end(_pools(database).current().fetch(sql, params, commits=commits))


class _Pools:
    """One database's pools, one per event loop; what their connections are opened with."""

    def __init__(self, database: Database) -> None:
        engine, settings = database.engine, database.settings
        self.engine, self.outage = engine, database.outage
        arguments, options = engine.dialect.create_connect_args(engine.url)
        self.arguments = tuple(arguments)
        self.options = {**options, **engines.postgres_connect_args(settings), "autocommit": True}
        self.size_max, self.wait_s = settings.db_pool_size, engines.pool_timeout_s(settings)
        assert self.size_max >= 1 and self.wait_s > 0, (self.size_max, self.wait_s)
        self._by_loop: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        self._lock = threading.Lock()

    def current(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        pool = self._by_loop.get(loop)
        if pool is None:
            with self._lock:
                for ended in [each for each in self._by_loop if each.is_closed()]:
                    self._by_loop.pop(ended).close()
                pool = self._by_loop[loop] = _LoopPool(self)
        return pool

    def close(self) -> None:
        with self._lock:
            pools, self._by_loop = list(self._by_loop.values()), {}
        for pool in pools:
            pool.close()


_pools_of: weakref.WeakKeyDictionary[Database, _Pools] = weakref.WeakKeyDictionary()
_pools_lock = threading.Lock()


def _pools(database: Database) -> _Pools:
    pools = _pools_of.get(database)
    if pools is None:
        with _pools_lock:
            pools = _pools_of.get(database)
            if pools is None:
                pools = _pools_of[database] = _Pools(database)
                database.on_dispose.append(pools.close)
    return pools


class _LoopPool:
    """One event loop's connections: at most `size_max` open, the idle ones kept for reuse."""

    def __init__(self, pools: _Pools) -> None:
        self._pools = pools
        self._free = asyncio.Semaphore(pools.size_max)
        self._idle: list[AsyncConnection[Any]] = []
        self._opened_at_s: dict[AsyncConnection[Any], float] = {}  # every open connection

    async def fetch(self, sql: driver.Statement, params: driver.Params, *, commits: bool) -> Rows:
        pools = self._pools
        try:
            async with asyncio.timeout(pools.wait_s):
                await self._free.acquire()
        except TimeoutError as error:
            timeout = PoolTimeout(f"no connection of the event loop's {pools.size_max} free in {pools.wait_s} s")
            raise no_connection_in_time(timeout, pools.outage) from error
        try:
            rows = await self._fetch(sql, params, commits)
        finally:
            self._free.release()
        pools.outage.reachable()
        return rows

    async def _fetch(self, sql: driver.Statement, params: driver.Params, commits: bool) -> Rows:
        pools = self._pools
        dialect = pools.engine.dialect
        connection = await self._checkout()
        text = sql.postgresql
        if observers.OBSERVED:
            observers.notify(pools.engine, text, params)
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(text, params)
                rows = await cursor.fetchall()
        except dialect.loaded_dbapi.Error as error:
            # The dialect's rule, as for the engine's connections: closed or broken.
            disconnect = bool(dialect.is_disconnect(error, cast(Any, connection), None))
            wrapped = driver.wrapped_error(dialect, text, params, error, disconnect=disconnect)
            if disconnect:
                lost_connections.lost_beside(pools.engine, self._close(connection))
            else:
                self._checkin(connection)
            unavailable = classify(wrapped, during_commit=commits, outage=pools.outage)
            if unavailable is None:
                raise wrapped from error
            pools.outage.unreachable(wrapped)
            raise unavailable from wrapped
        except BaseException:
            self._close(connection)  # stopped half-way: its state unknown
            raise
        self._checkin(connection)
        return rows

    async def _checkout(self) -> AsyncConnection[Any]:
        """An idle connection still fit for use, else a new one."""
        lost_at_s = lost_connections.lost_at_s(self._pools.engine)
        recycled_at_s = time.monotonic() - engines.POOL_RECYCLE_S
        while self._idle:  # at most size_max
            connection = self._idle.pop()
            opened_at_s = self._opened_at_s[connection]
            stale = opened_at_s < recycled_at_s or (lost_at_s is not None and opened_at_s < lost_at_s)
            if not stale and not engines.closed_by_server(connection):
                return connection
            self._close(connection)
        return await self._connect()

    async def _connect(self) -> AsyncConnection[Any]:
        from psycopg import AsyncConnection

        pools = self._pools
        try:
            connection = await AsyncConnection.connect(*pools.arguments, **pools.options)
        except pools.engine.dialect.loaded_dbapi.Error as error:
            # As the engine's pool: nothing was sent, so nothing was committed.
            wrapped = driver.wrapped_error(pools.engine.dialect, "connect", (), error, disconnect=False)
            unavailable = classify(wrapped, outage=pools.outage)
            if unavailable is None:
                raise wrapped from error
            pools.outage.unreachable(wrapped)
            raise unavailable from wrapped
        self._opened_at_s[connection] = time.monotonic()
        assert len(self._opened_at_s) <= self._pools.size_max, "each open connection holds the semaphore once"
        return connection

    def _checkin(self, connection: AsyncConnection[Any]) -> None:
        from psycopg.pq import TransactionStatus

        if connection.closed or connection.info.transaction_status != TransactionStatus.IDLE:
            self._close(connection)
            return
        self._idle.append(connection)

    def _close(self, connection: AsyncConnection[Any]) -> float | None:
        """Close `connection` at once, from any thread (its socket, no round trip): when it was opened."""
        connection.pgconn.finish()
        return self._opened_at_s.pop(connection, None)

    def close(self) -> None:
        for connection in list(self._opened_at_s):
            self._close(connection)
        self._idle.clear()
