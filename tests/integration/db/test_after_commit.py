"""`after_commit`: what a transaction's work defers (e.g. the `in_doubt` log line) happens once
the transaction has committed, never when it rolls back, and once only when the work ran more
than once (a SQLite group rolled back and run again with savepoints, a deadlock retry)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db.engine import Database, after_commit


@pytest.fixture
def database(settings: Settings) -> Iterator[Database]:
    database = Database(settings)
    database.transaction(lambda c: c.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY)")))
    yield database
    database.dispose()


def inserting(row_id: int, done: list[int], *, fails: bool = False) -> Callable[[Connection], None]:
    def work(connection: Connection) -> None:
        connection.execute(text("INSERT INTO rows (id) VALUES (:id)"), {"id": row_id})
        after_commit(lambda: done.append(row_id))
        assert row_id not in done, "deferred, not run inside the transaction"
        if fails:
            raise ValueError("refused")

    return work


def test_an_action_runs_after_the_commit(database: Database) -> None:
    done: list[int] = []
    database.transaction(inserting(1, done))
    assert done == [1]


def test_an_action_never_runs_when_the_transaction_rolls_back(database: Database) -> None:
    done: list[int] = []
    with pytest.raises(ValueError, match="refused"):
        database.transaction(inserting(1, done, fails=True))
    assert done == []


def test_outside_a_transaction_an_action_runs_at_once() -> None:
    done: list[int] = []
    after_commit(lambda: done.append(1))
    assert done == [1]


def test_each_call_of_a_group_run_again_runs_its_actions_once(database: Database) -> None:
    """On SQLite one call raising makes its group roll back and run every call again, each in
    its savepoint (ADR 0008): the calls that commit must still run their actions once."""
    done: list[int] = []
    works = [inserting(i, done, fails=i == 5) for i in range(12)]

    async def gather() -> list[object]:
        calls = (database.transaction_async(work) for work in works)
        return list(await asyncio.gather(*calls, return_exceptions=True))

    results = asyncio.run(gather())
    assert isinstance(results[5], ValueError)
    assert sorted(done) == [i for i in range(12) if i != 5]
