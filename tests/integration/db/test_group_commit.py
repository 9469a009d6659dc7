"""SQLite group commit (paycore.db.group_commit): transactions queued in one process commit
together, each in its own savepoint, and each caller gets exactly what a transaction of its
own would have given it. SQLite only: PostgreSQL commits transactions concurrently."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db.engine import Database, DatabaseBusy

WAIT_S_MAX = 10.0


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(Settings(database_url=f"sqlite:///{tmp_path / 'group.db'}", idempotency_wait_ms=3000))
    database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
    database.transaction(
        lambda c: c.execute(
            text(
                "CREATE TABLE child (id INTEGER PRIMARY KEY,"
                " parent_id INTEGER REFERENCES rows (id) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
    )
    yield database
    database.dispose()


def insert(row_id: int) -> Callable[[Connection], int]:
    """Insert a row recording how many rows this transaction saw before it."""

    def work(connection: Connection) -> int:
        seen = connection.execute(text("SELECT COUNT(*) FROM rows")).scalar_one()
        connection.execute(text("INSERT INTO rows (id, seen) VALUES (:id, :seen)"), {"id": row_id, "seen": seen})
        return int(seen)

    return work


def rows(database: Database) -> dict[int, int]:
    with database.read() as connection:
        return {row.id: row.seen for row in connection.execute(text("SELECT id, seen FROM rows"))}


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S_MAX
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


class Caller(threading.Thread):
    """One request's thread: runs one transaction and keeps its result or exception."""

    def __init__(self, database: Database, work: Callable[[Connection], Any]) -> None:
        super().__init__(daemon=True)
        self.database, self.work = database, work
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.database.transaction(self.work)
        except BaseException as error:  # handed to the test
            self.error = error


def queue_behind_a_leader(
    database: Database, works: list[Callable[[Connection], Any]], *, hold_s: float = 0.0
) -> tuple[Caller, list[Caller]]:
    """Start a leader whose transaction waits until `works` are all queued behind it (and
    `hold_s` more), so they run as one group after it."""
    started, queued = threading.Event(), threading.Event()

    def lead(connection: Connection) -> str:
        connection.execute(text("INSERT INTO rows (id, seen) VALUES (0, 0)"))
        started.set()
        assert queued.wait(WAIT_S_MAX)
        time.sleep(hold_s)
        return "leader"

    leader = Caller(database, lead)
    leader.start()
    assert started.wait(WAIT_S_MAX)
    followers = [Caller(database, work) for work in works]
    for follower in followers:
        follower.start()
    wait_until(lambda: database.write_groups.queued() == len(works))
    queued.set()
    return leader, followers


def join(*callers: Caller) -> None:
    for caller in callers:
        caller.join(WAIT_S_MAX)
        assert not caller.is_alive()


def test_queued_transactions_commit_as_one_group_in_queue_order(database: Database) -> None:
    groups_before = database.write_groups.groups_committed
    leader, followers = queue_behind_a_leader(database, [insert(i) for i in range(1, 9)])
    join(leader, *followers)
    assert [f.error for f in followers] == [None] * 8
    assert database.write_groups.groups_committed - groups_before == 2  # the leader's, then all 8
    found = rows(database)
    assert sorted(found) == list(range(9))
    # Each saw exactly the ones before it: serial, as if each had committed on its own.
    assert sorted(found[i] for i in range(1, 9)) == list(range(1, 9))
    assert sorted(f.result for f in followers) == list(range(1, 9))


def test_a_transaction_that_raises_rolls_back_only_its_own_writes(database: Database) -> None:
    def fails(connection: Connection) -> None:
        insert(5)(connection)
        raise ValueError("refused")

    works = [insert(1), insert(2), fails, insert(3), insert(4)]
    leader, followers = queue_behind_a_leader(database, works)
    join(leader, *followers)
    assert isinstance(followers[2].error, ValueError)
    assert [f.error for i, f in enumerate(followers) if i != 2] == [None] * 4
    assert sorted(rows(database)) == [0, 1, 2, 3, 4]


def test_a_failed_commit_fails_every_transaction_of_its_group(database: Database) -> None:
    """The group's COMMIT fails (a deferred foreign key): no caller of that group committed,
    so every one of them gets the error, including the ones whose own work went well."""

    def orphan(connection: Connection) -> None:
        connection.execute(text("INSERT INTO child (id, parent_id) VALUES (1, 999)"))

    leader, followers = queue_behind_a_leader(database, [insert(1), orphan, insert(2)])
    join(leader, *followers)
    assert leader.error is None
    for follower in followers:
        assert follower.error is not None and "FOREIGN KEY" in str(follower.error)
    assert sorted(rows(database)) == [0]
    # The database is usable afterwards.
    assert database.transaction(insert(3)) == 1


def test_a_transaction_queued_past_its_bound_never_runs(tmp_path: Path) -> None:
    database = Database(Settings(database_url=f"sqlite:///{tmp_path / 'bound.db'}", idempotency_wait_ms=200))
    try:
        database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, seen INTEGER)")))
        ran: list[int] = []

        def late(connection: Connection) -> None:
            ran.append(1)

        leader, followers = queue_behind_a_leader(database, [late], hold_s=0.6)
        join(leader, *followers)
        assert isinstance(followers[0].error, DatabaseBusy)
        assert ran == []
        assert leader.error is None and sorted(rows(database)) == [0]
    finally:
        database.dispose()
