"""`Database.transaction_async` (ADR 0012): a caller on an event loop gets what `transaction`
gives a thread, without blocking the loop. On SQLite its calls join the group commit queue,
the writer thread begins and commits each group, and the statements of a group of one loop's
calls run on that loop; on PostgreSQL `transaction` runs on a worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db import driver
from paycore.db.engine import Database, DatabaseBusy
from paycore.db.event_loop import LoopRunner
from paycore.kit import logs

CALLS = 40


@pytest.fixture
def database(settings: Settings) -> Iterator[Database]:
    database = Database(settings)
    database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
    yield database
    database.dispose()


def insert(row_id: int, threads: list[int] | None = None) -> Callable[[Connection], int]:
    """Insert a row recording how many rows this transaction saw before it."""

    def work(connection: Connection) -> int:
        if threads is not None:
            threads.append(threading.get_ident())
        seen = connection.execute(text("SELECT COUNT(*) FROM rows")).scalar_one()
        connection.execute(text("INSERT INTO rows (id, seen) VALUES (:id, :seen)"), {"id": row_id, "seen": seen})
        return int(seen)

    return work


def row_ids(database: Database) -> list[int]:
    with database.read() as connection:
        return sorted(row.id for row in connection.execute(text("SELECT id FROM rows")))


async def gather(database: Database, works: list[Callable[[Connection], Any]]) -> list[Any]:
    return list(await asyncio.gather(*(database.transaction_async(work) for work in works), return_exceptions=True))


def test_concurrent_calls_all_commit(database: Database) -> None:
    results = asyncio.run(gather(database, [insert(i) for i in range(CALLS)]))
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert row_ids(database) == list(range(CALLS))
    if not database.is_postgres:
        # Serial, as if each had committed on its own: every count from 0 to CALLS-1 seen once.
        assert sorted(results) == list(range(CALLS))


def test_a_call_that_raises_gets_its_error_and_undoes_only_its_own_writes(database: Database) -> None:
    def fails(connection: Connection) -> int:
        insert(999)(connection)
        raise ValueError("refused")

    works = [insert(i) for i in range(10)]
    works.insert(5, fails)
    results = asyncio.run(gather(database, works))
    assert isinstance(results[5], ValueError)
    assert [r for i, r in enumerate(results) if i != 5 and isinstance(r, BaseException)] == []
    assert row_ids(database) == list(range(10))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_groups_commit_together_and_run_on_the_loop(database: Database) -> None:
    threads: list[int] = []
    groups_before = database.write_groups.groups_committed

    async def main() -> int:
        await gather(database, [insert(i, threads) for i in range(CALLS)])
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert row_ids(database) == list(range(CALLS))
    assert set(threads) == {loop_thread}  # the statements ran on the loop, not the writer
    assert database.write_groups.groups_committed - groups_before < CALLS  # grouped


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_a_group_that_succeeds_takes_no_savepoint(database_url: str) -> None:
    """Savepoints are only paid for once a call of the group raised (the test above)."""
    database = Database(Settings(database_url=database_url, db_pool_size=1))  # one connection, traced
    statements: list[str] = []
    try:
        database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
        with database.engine.connect() as connection:
            connection.connection.driver_connection.set_trace_callback(statements.append)  # type: ignore[union-attr]
        groups_before = database.write_groups.groups_committed
        results = asyncio.run(gather(database, [insert(i) for i in range(CALLS)]))
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert database.write_groups.groups_committed - groups_before < CALLS  # some group held several
        assert len([s for s in statements if s.startswith("INSERT INTO rows")]) == CALLS
        assert [s for s in statements if "SAVEPOINT" in s] == []
    finally:
        database.dispose()


def test_on_sqlite_a_call_queued_past_its_bound_never_runs(tmp_path: Path) -> None:
    """A request thread's slow transaction holds the queue past the bound of the calls
    queued behind it: they are answered `DatabaseBusy` without running."""
    database = Database(Settings(database_url=f"sqlite:///{tmp_path / 'bound.db'}", idempotency_wait_ms=200))
    try:
        database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
        started = threading.Event()

        def slow(connection: Connection) -> None:
            insert(0)(connection)
            started.set()
            time.sleep(0.6)

        leader = threading.Thread(target=database.transaction, args=(slow,))
        leader.start()
        assert started.wait(10)
        ran: list[int] = []
        began = time.monotonic()
        results = asyncio.run(gather(database, [lambda c: ran.append(1) for _ in range(3)]))
        waited_s = time.monotonic() - began
        leader.join(10)
        assert all(isinstance(result, DatabaseBusy) for result in results), results
        assert ran == []
        assert waited_s < 2  # answered once the queue moved, not held for ever
        assert row_ids(database) == [0]
        assert database.transaction(insert(1)) == 1  # usable afterwards
    finally:
        database.dispose()


def test_sync_and_async_callers_share_one_queue(database: Database) -> None:
    """Request threads (sync endpoints, workers) and the loop's callers in one process."""
    errors: list[BaseException] = []

    def thread_caller(first: int) -> None:
        try:
            for row_id in range(first, first + 10):
                database.transaction(insert(row_id))
        except BaseException as error:  # handed to the test
            errors.append(error)

    threads = [threading.Thread(target=thread_caller, args=(1000 + 100 * n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    results = asyncio.run(gather(database, [insert(i) for i in range(CALLS)]))
    for thread in threads:
        thread.join(10)
    assert errors == [] and [r for r in results if isinstance(r, BaseException)] == []
    expected = list(range(CALLS)) + [1000 + 100 * n + i for n in range(4) for i in range(10)]
    assert row_ids(database) == sorted(expected)


def test_the_loop_runs_while_a_group_waits_for_the_write_lock(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock: the group's BEGIN waits on the writer's
    thread, and the loop goes on serving everything else meanwhile."""
    path = tmp_path / "held.db"
    database = Database(Settings(database_url=f"sqlite:///{path}", idempotency_wait_ms=5000))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
        holder.execute("BEGIN IMMEDIATE")

        async def main() -> tuple[int, int]:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                for _ in range(30):
                    ticks += 1
                    await asyncio.sleep(0.01)
                holder.execute("ROLLBACK")  # let the writer in

            task = asyncio.create_task(ticker())
            seen = await database.transaction_async(insert(1))
            await task
            return ticks, seen

        assert asyncio.run(main()) == (30, 0)
        assert row_ids(database) == [1]
    finally:
        holder.close()
        database.dispose()


def test_loop_runner_runs_the_function_once_even_if_the_loop_stops_first() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    ran: list[int] = []
    LoopRunner(loop)(lambda: ran.append(threading.get_ident()))  # a closed loop: run right here
    assert ran == [threading.get_ident()]

    stopped = asyncio.new_event_loop()  # open, never run: the waiting thread takes it over
    try:
        LoopRunner(stopped)(lambda: ran.append(2))
        assert ran[-1] == 2 and len(ran) == 2
    finally:
        stopped.close()


def test_loop_runner_hands_back_the_function_s_exception() -> None:
    def boom() -> None:
        raise KeyError("x")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(LoopRunner(loop), boom)

    with pytest.raises(KeyError):
        asyncio.run(main())


_ANY_ROW = driver.statement("SELECT id FROM rows LIMIT 1")


def test_peek_sees_a_write_committed_elsewhere_at_once(database: Database, database_url: str) -> None:
    assert database.peek(_ANY_ROW, ()) == []
    other = Database(Settings(database_url=database_url))
    try:
        other.transaction(insert(7))
    finally:
        other.dispose()
    assert database.peek(_ANY_ROW, ()) == [(7,)]


def test_on_sqlite_no_free_connection_is_database_busy(tmp_path: Path) -> None:
    """Every pooled connection is taken (pool and overflow): the writer cannot begin, and the
    caller is answered `DatabaseBusy` within the bound, as `transaction` answers it."""
    database = Database(
        Settings(database_url=f"sqlite:///{tmp_path / 'pool.db'}", db_pool_size=1, idempotency_wait_ms=200)
    )
    taken = []
    try:
        database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
        pool = database.engine.pool
        while pool.checkedout() < pool.size() + pool._max_overflow:  # type: ignore[attr-defined]
            taken.append(database.engine.connect())
        with pytest.raises(DatabaseBusy):
            asyncio.run(database.transaction_async(insert(1)))
        for connection in taken:
            connection.close()
        taken.clear()
        assert asyncio.run(database.transaction_async(insert(1))) == 0  # usable once one is free
    finally:
        for connection in taken:
            connection.close()
        database.dispose()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_dispose_ends_the_writer_and_a_later_call_starts_another(database: Database) -> None:
    assert asyncio.run(database.transaction_async(insert(1))) == 0
    first = database.write_groups._writer
    assert first is not None and first.is_alive()
    database.dispose()
    assert not first.is_alive()
    assert asyncio.run(database.transaction_async(insert(2))) == 1
    second = database.write_groups._writer
    assert second is not None and second is not first and second.is_alive()
    assert row_ids(database) == [1, 2]


def test_work_runs_under_its_callers_request_id(database: Database) -> None:
    """A group's leader (here the writer thread) runs other callers' work: the audit events
    and log lines that work writes must still name the caller's request (SPEC §12)."""

    async def one(request_id: str) -> str | None:
        token = logs.set_request_id(request_id)
        try:
            return await database.transaction_async(lambda connection: logs.request_id())
        finally:
            logs.reset_request_id(token)

    async def many() -> list[str | None]:
        return list(await asyncio.gather(*(one(f"req-{index}") for index in range(CALLS))))

    assert asyncio.run(many()) == [f"req-{index}" for index in range(CALLS)]


Ids = tuple[str | None, str | None]  # (request id, worker id)


def _seen_from_threads(database: Database, ids_of: Callable[[int], Ids]) -> dict[str, Ids]:
    """8 threads at once, each under its own (request id, worker id), 20 transactions each:
    the ids each transaction's work ran under, by thread and round."""
    barrier = threading.Barrier(8)
    seen: dict[str, Ids] = {}

    def one(index: int) -> None:
        request_id, worker_id = ids_of(index)
        token, worker = logs.set_request_id(request_id), logs.set_worker_id(worker_id)
        try:
            barrier.wait(timeout=10)
            for round_index in range(20):
                seen[f"{index}-{round_index}"] = database.transaction(
                    lambda connection: (logs.request_id(), logs.worker_id())
                )
        finally:
            logs.reset_worker_id(worker)
            logs.reset_request_id(token)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return seen


def test_threads_work_runs_under_its_callers_request_id(database: Database) -> None:
    seen = _seen_from_threads(database, lambda index: (f"req-{index}", None))
    assert {key: request_id for key, (request_id, _) in seen.items()} == {
        f"{index}-{r}": f"req-{index}" for index in range(8) for r in range(20)
    }


def test_threads_work_runs_under_its_callers_worker_id_or_none(database: Database) -> None:
    """A worker's thread leading a group must not lend its worker id to an API request's work
    in that group: an event the request writes would name a worker that never ran it (seen in
    docs/api.md's example, `serve --dev` on SQLite, where the API and the workers share the
    process's group commit)."""

    def ids_of(index: int) -> Ids:
        return (f"req-{index}", None) if index % 2 == 0 else (None, f"worker-{index}")

    seen = _seen_from_threads(database, ids_of)
    assert seen == {f"{index}-{r}": ids_of(index) for index in range(8) for r in range(20)}
