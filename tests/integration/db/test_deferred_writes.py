"""Deferred writes (paycore.db.driver.defer): on PostgreSQL a deferred write travels with the
next statement or with the COMMIT; on SQLite it runs at once. On both, the transaction must
behave exactly as if every write had run where it was written."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from paycore.db import driver
from paycore.db.engine import Database

_INSERT = driver.statement("INSERT INTO deferred_probe (id, note) VALUES (?, ?)")
_COUNT = driver.statement("SELECT COUNT(*) FROM deferred_probe")


@pytest.fixture
def probe(database: Database) -> Iterator[Database]:
    database.transaction(
        lambda c: c.execute(text("CREATE TABLE deferred_probe (id INTEGER PRIMARY KEY, note VARCHAR(32) NOT NULL)"))
    )
    yield database


def notes(database: Database) -> dict[int, str]:
    with database.read() as connection:
        return {row.id: row.note for row in connection.execute(text("SELECT id, note FROM deferred_probe"))}


def defer_rows(*ids: int) -> Callable[[Connection], None]:
    def work(connection: Connection) -> None:
        for row_id in ids:
            driver.defer(connection, _INSERT, (row_id, f"row {row_id}"))

    return work


def test_later_statements_see_deferred_writes(probe: Database) -> None:
    def work(connection: Connection) -> tuple[int, int]:
        driver.defer(connection, _INSERT, (1, "first"))
        seen_by_driver = driver.fetch(connection, _COUNT, ())[0][0]
        driver.defer(connection, _INSERT, (2, "second"))
        seen_by_sqlalchemy = connection.execute(text("SELECT COUNT(*) FROM deferred_probe")).scalar_one()
        driver.defer(connection, _INSERT, (3, "third"))  # sent with the COMMIT
        return int(seen_by_driver), int(seen_by_sqlalchemy)

    assert probe.transaction(work) == (1, 2)
    assert notes(probe) == {1: "first", 2: "second", 3: "third"}


def test_a_failing_deferred_write_fails_the_whole_transaction(probe: Database) -> None:
    probe.transaction(defer_rows(1))

    with pytest.raises(IntegrityError):
        probe.transaction(defer_rows(2, 1, 3))  # 1 exists: the transaction fails at its COMMIT

    assert notes(probe) == {1: "row 1"}
    probe.transaction(defer_rows(4))  # the connection went back to the pool usable
    assert notes(probe) == {1: "row 1", 4: "row 4"}


def test_writes_deferred_by_a_rolled_back_transaction_are_forgotten(probe: Database) -> None:
    class Refused(Exception):
        pass

    def refused(connection: Connection) -> None:
        driver.defer(connection, _INSERT, (1, "rolled back"))
        raise Refused

    with pytest.raises(Refused):
        probe.transaction(refused)
    probe.transaction(defer_rows(2))  # most likely on the same pooled connection

    assert notes(probe) == {2: "row 2"}


def test_a_savepoint_rollback_keeps_writes_deferred_before_it(probe: Database) -> None:
    def work(connection: Connection) -> None:
        driver.defer(connection, _INSERT, (1, "before the savepoint"))
        savepoint = connection.begin_nested()
        driver.defer(connection, _INSERT, (2, "inside the savepoint"))
        savepoint.rollback()

    probe.transaction(work)

    assert notes(probe) == {1: "before the savepoint"}
