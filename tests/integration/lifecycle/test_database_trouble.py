"""What is an item's fault and what is the database's (lifecycle/faults.py): an item's own error
undoes that item's writes and lets the batch go on; the database going away in the middle of an
item's part stops the whole batch, as before, with nothing of it kept and nothing recorded as a
fault (the worker then backs off as a whole: workers/loop.py). On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from sqlalchemy import Connection, func, select, text
from sqlalchemy.exc import OperationalError

from paycore.db.availability import DatabaseUnavailable
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.ledger.models import accounts as ledger_accounts
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.lifecycle import faults
from paycore.lifecycle.models import work_faults
from tests.support import tamper
from tests.support.payouts import funded_source

TENANT = "acme"
Trouble = Callable[[Connection], None]


def batch(connection: Connection, *, isolation: faults.Isolation, trouble: Trouble) -> list[Any]:
    """Three items, each writing an account; the second one then meets `trouble`."""
    done = []
    for number in range(3):
        part = partial(item, connection, number, trouble if number == 1 else None)
        done.append(isolation.run(connection, part, about={"item": str(number)}))
    return done


def item(connection: Connection, number: int, trouble: Trouble | None) -> str:
    account = ledger.create_account(
        connection,
        TENANT,
        code=f"item.{number}",
        currency="USD",
        normal_balance="credit",
        no_overdraft=False,
        metadata={},
        now_us=now_us(),
    )
    if trouble is not None:
        trouble(connection)
    return account.id


def accounts_of_items(database: Database) -> list[str]:
    with database.read() as connection:
        query = select(ledger_accounts.c.code).where(ledger_accounts.c.code.like("item.%"))
        return sorted(connection.execute(query).scalars())


def fault_rows(database: Database) -> int:
    with database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(work_faults)).scalar_one())


def voided_hold(database: Database) -> str:
    source = funded_source(database, TENANT, 1_000)

    def work(connection: Connection) -> str:
        sink = ledger.create_account(
            connection,
            TENANT,
            code="sink",
            currency="USD",
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
        legs = (EntrySpec(source, "debit", 100), EntrySpec(sink.id, "credit", 100))
        return ledger.create_transfer(connection, TENANT, TransferSpec(legs, pending=True), now_us=now_us()).id

    transfer_id = database.transaction(work)
    tamper.void_hold(database, TENANT, transfer_id)
    return transfer_id


def test_an_items_own_error_undoes_that_item_alone_and_the_batch_goes_on(database: Database) -> None:
    transfer_id = voided_hold(database)

    def void_again(connection: Connection) -> None:
        ledger.void_pending(connection, TENANT, transfer_id, now_us=now_us(), owner_id=None)  # TransferNotPending

    done = faults.transaction(database, partial(batch, trouble=void_again))

    assert isinstance(done[1], faults.Fault)
    assert (done[1].code, done[1].message) == ("transfer_not_pending", "the transfer is voided, not pending")
    assert isinstance(done[0], str) and isinstance(done[2], str)
    assert accounts_of_items(database) == ["item.0", "item.2"]  # item 1's own write undone with it


def test_the_database_going_away_inside_an_items_part_stops_the_whole_batch(database: Database) -> None:
    if database.is_postgres:
        # The item's statement ends its own server process, as an administrator or a crash does.
        def trouble(connection: Connection) -> None:
            connection.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))

        expected: type[Exception] = DatabaseUnavailable
    else:
        # SQLite cannot open a database file it was given: its own operation failed.
        def trouble(connection: Connection) -> None:
            connection.execute(text("ATTACH DATABASE '/nonexistent/directory/x.db' AS elsewhere"))

        expected = OperationalError

    with pytest.raises(expected):
        faults.transaction(database, partial(batch, trouble=trouble))

    assert accounts_of_items(database) == []  # nothing of the batch kept: the round stopped whole
    assert fault_rows(database) == 0
