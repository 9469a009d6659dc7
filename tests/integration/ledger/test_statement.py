"""An account's statement is in commit order: a client tailing it never misses an entry.

Entry ids are made before a transfer takes its account's row lock, so a transfer that made its
ids first can commit last; paging by id would then skip it for a client whose cursor already
passed. Entries are therefore numbered per account under the row lock (`account_sequence`) and
the statement pages by that number.
"""

from __future__ import annotations

import threading

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.kit.errors import InvalidRequest
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify

TENANT = "statements"
WRITERS = 4
TRANSFERS_PER_WRITER = 60
PAGE_LIMIT = 7


def _account(database: Database, code: str, normal_balance: str) -> str:
    def work(connection: Connection) -> str:
        return ledger.create_account(
            connection, TENANT, code=code, currency="USD", normal_balance=normal_balance,
            no_overdraft=False, metadata={}, now_us=now_us(),
        ).id  # fmt: skip

    return database.transaction(work)


def _page(database: Database, account_id: str, cursor: str | None) -> list[ledger.Entry]:
    with database.read() as connection:
        page, _ = ledger.list_entries(connection, TENANT, account_id, limit=PAGE_LIMIT, starting_after=cursor)
    return page


def test_a_client_tailing_a_statement_during_concurrent_writes_sees_every_entry_once(database: Database) -> None:
    tail = _account(database, "tailed", "credit")
    sources = [_account(database, f"source-{n}", "debit") for n in range(WRITERS)]
    done = threading.Event()
    failures: list[BaseException] = []

    def write(source: str) -> None:
        spec = TransferSpec(entries=(EntrySpec(source, "debit", 3), EntrySpec(tail, "credit", 3)))
        try:
            for _ in range(TRANSFERS_PER_WRITER):
                database.transaction(lambda c: ledger.create_transfer(c, TENANT, spec, now_us=now_us()))
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)

    writers = [threading.Thread(target=write, args=(source,)) for source in sources]
    for writer in writers:
        writer.start()
    seen: list[ledger.Entry] = []
    cursor: str | None = None
    while True:  # tail the statement while the writers run, then drain it once they are done
        finished = done.is_set()
        page = _page(database, tail, cursor)
        seen.extend(page)
        if page:
            cursor = page[-1].id
        elif finished:
            break
        if not any(writer.is_alive() for writer in writers):
            done.set()
    for writer in writers:
        writer.join(timeout=60)
    assert not failures, failures

    with database.read() as connection:
        everything, has_more = ledger.list_entries(connection, TENANT, tail, limit=10_000, starting_after=None)
        assert verify(connection).ok
    assert not has_more
    assert len(everything) == WRITERS * TRANSFERS_PER_WRITER
    assert [entry.id for entry in seen] == [entry.id for entry in everything], "the tail missed or repeated entries"
    assert [entry.account_sequence for entry in seen] == list(range(1, len(everything) + 1))


def test_a_cursor_that_is_not_an_entry_of_the_account_is_refused(database: Database) -> None:
    account = _account(database, "a", "credit")
    other = _account(database, "b", "debit")
    spec = TransferSpec(entries=(EntrySpec(other, "debit", 1), EntrySpec(account, "credit", 1)))
    transfer = database.transaction(lambda c: ledger.create_transfer(c, TENANT, spec, now_us=now_us()))
    other_entry = next(entry.id for entry in transfer.entries if entry.account_id == other)
    with database.read() as connection:
        for cursor in ("ent_nope", other_entry):
            try:
                ledger.list_entries(connection, TENANT, account, limit=5, starting_after=cursor)
            except InvalidRequest as error:
                assert error.param == "starting_after"
            else:
                raise AssertionError(f"cursor {cursor} was accepted")
