"""The processor's fees on the ledger (docs/ledger.md, "Processor fees"; issue 20): booked once
per key, whatever re-runs or processes book it again, read back for a whole chunk of keys in
one statement, and leaving the books and the money invariants intact."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, text

from paycore.db import observers
from paycore.db.engine import Database
from paycore.invariants import service as invariants
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import chart, fees_repository, repository
from paycore.ledger import service as ledger
from paycore.ledger.errors import BalanceLimitExceeded, FeeKeyTaken
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify
from paycore.payments import service as payments

TENANT = "acme"
RUN = "rcn_fees_test"  # what books the fees: a reconciliation run owns their transfers
OTHER_TENANT = "globex"
BOOKER = Path(__file__).with_name("fee_booker.py")
LINE_TIMEOUT_S = 30
LOCK_WAIT_TIMEOUT_S = 10
BOOKERS = 4

T = TypeVar("T")


def run(database: Database, work: Callable[[Connection], T]) -> T:
    return database.transaction(work)


def book(database: Database, key: str, fee_minor: int, *, tenant: str = TENANT, currency: str = "USD") -> bool:
    return run(
        database,
        lambda c: ledger.book_processor_fee(
            c, tenant, key=key, currency=currency, fee_minor=fee_minor, now_us=now_us(), owner_id=RUN
        ),
    )


def booked(database: Database, keys: list[str], *, tenant: str = TENANT) -> dict[str, int]:
    with database.read() as connection:
        return ledger.booked_fees(connection, tenant, keys)


def posted(database: Database, code: str, *, tenant: str = TENANT) -> tuple[int, int, int]:
    """(debits posted, credits posted, posted balance) of a system account."""
    with database.read() as connection:
        account = ledger.find_account_by_code(connection, tenant, code)
        assert account is not None, code
        row = repository.get_account(connection, tenant, account.id)
    assert row is not None
    return row.debits_posted_minor, row.credits_posted_minor, account.balance.posted_minor


def counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return repository.count_rows(connection)


def assert_books_hold(database: Database) -> None:
    """`paycore ledger verify`, and every invariant check of the worker's job over everything."""
    with database.read() as connection:
        assert verify(connection).problems == []
    result = invariants.run_due(database, invariants.Budget(rows_max=10_000, interval_ms=0), "test-worker")
    assert result.checks_run > 0
    assert result.found == []


def a_settled_payment(database: Database, amount_minor: int) -> tuple[str, str]:
    """A succeeded payment of `amount_minor` to a merchant's balance: (payment id, merchant account id)."""

    def work(connection: Connection) -> tuple[str, str]:
        merchant = ledger.create_account(
            connection,
            TENANT,
            code="merchant.m_42",
            currency="USD",
            normal_balance="credit",
            no_overdraft=True,
            metadata={},
            now_us=now_us(),
        )
        payment = payments.import_settled_payment(
            connection,
            TENANT,
            payment_id=ids.new_id("pay"),
            amount_minor=amount_minor,
            currency="USD",
            destination_account_id=merchant.id,
            now_us=now_us(),
        )
        return payment.id, merchant.id

    return run(database, work)


def a_client_transfer(connection: Connection, key: str) -> None:
    """A transfer a client made with POST /v1/transfers under `key`: not a processor fee."""
    accounts = [
        ledger.ensure_account(
            connection, TENANT, code=code, currency="USD", normal_balance=normal, no_overdraft=False, now_us=now_us()
        )
        for code, normal in (("cash", "debit"), ("shop", "credit"))
    ]
    spec = TransferSpec((EntrySpec(accounts[0].id, "debit", 320), EntrySpec(accounts[1].id, "credit", 320)))
    ledger.create_transfer(connection, TENANT, spec, now_us=now_us(), idempotency_key=key)


@contextmanager
def statements(database: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def listener(sql: str, *_: Any) -> None:
        seen.append(sql)

    with observers.observing(database.engine, listener):
        yield seen


# ---------------------------------------------------------------------------- booking


def test_a_charges_fee_is_booked_once_from_clearing_to_fees(database: Database) -> None:
    """docs/ledger.md, "Processor fees": a 100.00 charge, the sandbox's fee 2.9% + 30 = 320."""
    payment_id, merchant = a_settled_payment(database, 10_000)
    key = "settlement-fee:ch_1"

    def first(connection: Connection) -> bool:
        return ledger.book_processor_fee(
            connection,
            TENANT,
            key=key,
            currency="USD",
            fee_minor=320,
            now_us=now_us(),
            owner_id=RUN,
            payment_id=payment_id,
        )

    assert run(database, first) is True
    assert posted(database, "processor.clearing.USD") == (10_000, 320, 9_680)
    assert posted(database, "processor.fees.USD") == (320, 0, 320)
    with database.read() as connection:
        assert ledger.get_account(connection, TENANT, merchant).balance.posted_minor == 10_000  # untouched
        fees = ledger.find_account_by_code(connection, TENANT, chart.processor_fees("USD"))
        clearing = ledger.find_account_by_code(connection, TENANT, chart.processor_clearing("USD"))
        row = repository.get_transfer_by_key(connection, TENANT, key)
        assert row is not None
        transfer = ledger.get_transfer(connection, TENANT, row.id)
    assert fees is not None and (fees.normal_balance, fees.no_overdraft) == ("debit", False)
    assert clearing is not None
    assert {(e.account_id, e.direction, e.amount_minor) for e in transfer.entries} == {
        (fees.id, "debit", 320),
        (clearing.id, "credit", 320),
    }
    assert (transfer.kind, transfer.status, transfer.reference_type, transfer.reference_id) == (
        "transfer",
        "posted",
        "payment",
        payment_id,
    )
    assert_books_hold(database)

    before = counts(database)
    assert run(database, first) is False  # the re-run: found by its key, nothing booked
    assert book(database, key, 999) is False  # at another amount: still the first one's
    assert counts(database) == before
    assert booked(database, [key]) == {key: 320}
    assert posted(database, "processor.fees.USD") == (320, 0, 320)
    assert_books_hold(database)


def test_a_fee_of_zero_books_nothing(database: Database) -> None:
    before = counts(database)
    assert book(database, "settlement-fee:ch_0", 0) is False
    assert counts(database) == before
    assert booked(database, ["settlement-fee:ch_0"]) == {}


@pytest.mark.parametrize(
    ("fields", "error", "param"),
    [
        ({"fee_minor": -1}, InvalidAmount, "fee_minor"),
        ({"fee_minor": 3.2}, InvalidAmount, "fee_minor"),
        ({"fee_minor": "320"}, InvalidAmount, "fee_minor"),
        ({"fee_minor": True}, InvalidAmount, "fee_minor"),
        ({"fee_minor": None}, InvalidAmount, "fee_minor"),
        ({"fee_minor": AMOUNT_MINOR_MAX + 1}, InvalidAmount, "fee_minor"),
        ({"currency": "XXX"}, UnsupportedCurrency, "currency"),
        ({"currency": "usd"}, UnsupportedCurrency, "currency"),
        ({"key": ""}, InvalidRequest, "key"),
        ({"key": "k" * 256}, InvalidRequest, "key"),
        ({"key": "settlement-fee:\nch_1"}, InvalidRequest, "key"),
        ({"key": "settlement-fee:ch_é"}, InvalidRequest, "key"),
    ],
)
def test_invalid_fees_are_refused_with_typed_errors_and_write_nothing(
    database: Database, fields: dict[str, Any], error: type[Exception], param: str
) -> None:
    arguments: dict[str, Any] = {"key": "settlement-fee:ch_1", "currency": "USD", "fee_minor": 320, **fields}
    before = counts(database)
    with pytest.raises(error) as raised:
        run(database, lambda c: ledger.book_processor_fee(c, TENANT, now_us=now_us(), owner_id=RUN, **arguments))
    assert getattr(raised.value, "param", None) == param
    assert counts(database) == before


def test_the_largest_fee_and_the_longest_key_are_booked(database: Database) -> None:
    key = "k" * 255
    assert book(database, key, AMOUNT_MINOR_MAX) is True
    assert booked(database, [key]) == {key: AMOUNT_MINOR_MAX}
    assert posted(database, "processor.clearing.USD") == (0, AMOUNT_MINOR_MAX, -AMOUNT_MINOR_MAX)
    assert_books_hold(database)


def test_a_fee_past_the_balance_limit_is_refused_and_the_transaction_rolled_back(database: Database) -> None:
    assert book(database, "settlement-fee:ch_1", AMOUNT_MINOR_MAX) is True
    before = counts(database)
    with pytest.raises(BalanceLimitExceeded):
        book(database, "settlement-fee:ch_2", 1)
    assert counts(database) == before
    assert booked(database, ["settlement-fee:ch_1", "settlement-fee:ch_2"]) == {"settlement-fee:ch_1": AMOUNT_MINOR_MAX}
    assert_books_hold(database)


def test_a_key_a_client_took_for_its_own_transfer_is_refused(database: Database) -> None:
    """ledger_transfers.idempotency_key also holds the keys of clients' transfers: a fee is
    never taken to be booked because some other transfer has its key."""
    key = "settlement-fee:ch_9"

    run(database, lambda c: a_client_transfer(c, key))
    assert booked(database, [key]) == {}
    with pytest.raises(FeeKeyTaken) as raised:
        book(database, key, 320)
    assert raised.value.param == "key"
    assert booked(database, [key]) == {}
    assert_books_hold(database)


def test_a_chunk_of_fees_is_booked_in_a_few_statements(database: Database) -> None:
    """What the reconciliation does per chunk: new fees in three currencies, fees booked by an
    earlier run, a key given twice, fees of 0, and a key a client took, in one call."""
    assert book(database, "settlement-fee:ch_before", 100) is True
    taken = "settlement-fee:ch_taken"
    run(database, lambda c: a_client_transfer(c, taken))
    new = {f"settlement-fee:ch_{number}": 1 + number % 7 for number in range(990)}
    currencies = ("USD", "EUR", "JPY")
    fees = [ledger.ProcessorFee(key, currencies[number % 3], fee) for number, (key, fee) in enumerate(new.items())]
    fees += [
        ledger.ProcessorFee("settlement-fee:ch_before", "USD", 100),  # booked by an earlier run
        ledger.ProcessorFee("settlement-fee:ch_0", "USD", 999),  # again in this chunk: the first one counts
        ledger.ProcessorFee("settlement-fee:ch_zero", "USD", 0),
        ledger.ProcessorFee(taken, "USD", 5),
    ]
    with statements(database) as seen:
        result = run(database, lambda c: ledger.book_processor_fees(c, TENANT, fees, now_us=now_us(), owner_id=RUN))
    assert result.booked == frozenset(new) and result.taken == frozenset({taken})
    # Accounts: 1 read and 4 inserts (EUR's and JPY's are new); transfers 2 (500 a statement);
    # totals 6 (two accounts a currency); entries 31 (64 a statement); the conflicted keys'
    # read 1; SQLite's BEGIN 1. One at a time, it was five statements a fee.
    assert len(seen) <= 46, seen
    assert booked(database, [*new, "settlement-fee:ch_before", "settlement-fee:ch_zero", taken]) == {
        **new,
        "settlement-fee:ch_before": 100,
    }
    for index, currency in enumerate(currencies):
        expected = sum(fee.fee_minor for fee in fees[index:990:3]) + (100 if currency == "USD" else 0)
        assert posted(database, f"processor.fees.{currency}") == (expected, 0, expected)
        assert posted(database, f"processor.clearing.{currency}") == (0, expected, -expected)
    assert_books_hold(database)


def test_a_chunk_with_an_invalid_fee_is_refused_whole(database: Database) -> None:
    fees = [ledger.ProcessorFee(f"settlement-fee:ch_{number}", "USD", 320) for number in range(5)]
    fees[3] = ledger.ProcessorFee("settlement-fee:ch_3", "USD", -320)
    before = counts(database)
    with pytest.raises(InvalidAmount) as raised:
        run(database, lambda c: ledger.book_processor_fees(c, TENANT, fees, now_us=now_us(), owner_id=RUN))
    assert raised.value.param == "fees[3].fee_minor"
    assert counts(database) == before


def test_a_chunk_larger_than_one_call_holds_is_refused(database: Database) -> None:
    fees = [ledger.ProcessorFee(f"settlement-fee:ch_{n}", "USD", 1) for n in range(ledger.FEES_PER_CALL_MAX + 1)]
    with pytest.raises(AssertionError):
        run(database, lambda c: ledger.book_processor_fees(c, TENANT, fees, now_us=now_us(), owner_id=RUN))


# ---------------------------------------------------------------------------- reading


def test_booked_fees_reads_a_chunk_of_keys_in_one_statement(database: Database) -> None:
    fees = {"settlement-fee:ch_a": 320, "settlement-fee:ch_b": 59, "settlement-fee:ch_c": 1}
    for key, fee_minor in fees.items():
        assert book(database, key, fee_minor) is True
    assert book(database, "settlement-fee:ch_eur", 77, currency="EUR") is True
    assert book(database, "settlement-fee:ch_a", 500, tenant=OTHER_TENANT) is True  # another tenant's
    unknown = [f"settlement-fee:ch_unknown_{number}" for number in range(ledger.FEE_KEYS_PER_READ_MAX - 4)]
    keys = [*fees, "settlement-fee:ch_eur", *unknown]
    assert len(keys) == ledger.FEE_KEYS_PER_READ_MAX

    with database.read() as connection, statements(database) as seen:
        found = ledger.booked_fees(connection, TENANT, keys)
    assert found == {**fees, "settlement-fee:ch_eur": 77}
    assert len(seen) == 1, seen
    assert booked(database, ["settlement-fee:ch_a", "settlement-fee:ch_b"], tenant=OTHER_TENANT) == {
        "settlement-fee:ch_a": 500
    }
    assert booked(database, []) == {}
    assert booked(database, ["settlement-fee:ch_a", "settlement-fee:ch_a"]) == {"settlement-fee:ch_a": 320}
    assert posted(database, "processor.fees.USD") == (380, 0, 380)
    assert posted(database, "processor.fees.EUR") == (77, 0, 77)
    assert_books_hold(database)


def test_booked_fees_refuses_more_keys_than_one_read_holds(database: Database) -> None:
    keys = [f"settlement-fee:ch_{number}" for number in range(ledger.FEE_KEYS_PER_READ_MAX + 1)]
    with pytest.raises(AssertionError), database.read() as connection:
        ledger.booked_fees(connection, TENANT, keys)


def test_booked_fees_finds_the_keys_through_their_own_index(database: Database, backend: str) -> None:
    """The key's unique index (tenant_id, idempotency_key), partial: on PostgreSQL as a generic
    plan (psycopg prepares a statement it runs often), so that no plan made on a small table
    reads every transfer of the tenant (ADR 0010)."""
    assert book(database, "settlement-fee:ch_1", 320) is True
    index = "uq_ledger_transfers_tenant_id_idempotency_key"
    with database.read() as connection:
        if backend == "sqlite":
            sql = fees_repository.KEYED_DEBITS.sqlite
            plan = "\n".join(
                str(row[3]) for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", ("t", "[]", "p"))
            )
            assert f"SEARCH t USING INDEX {index} (tenant_id=? AND idempotency_key=?)" in plan, plan
            return
        numbered = fees_repository.KEYED_DEBITS.postgresql.replace("%s", "{}").format("$1", "$2::text[]", "$3")
        connection.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        connection.exec_driver_sql(f"PREPARE keyed_debits AS {numbered}")
        plan = "\n".join(row[0] for row in connection.exec_driver_sql("EXPLAIN EXECUTE keyed_debits ('t', '{}', 'p')"))
    transfers_scan = [line for line in plan.splitlines() if " on ledger_transfers " in line]
    assert len(transfers_scan) == 1 and f"Index Scan using {index} " in transfers_scan[0], plan
    assert "((tenant_id)::text = $1)" in plan and "((idempotency_key)::text = ANY ($2))" in plan, plan


# ---------------------------------------------------------------------------- processes


class Booker:
    """A fee_booker.py OS process, and the JSON lines it prints, read with a bounded wait."""

    def __init__(self, database_url: str, keys: list[str], fee_minor: int, *, hold: bool, start_at_ns: int = 0) -> None:
        config = {
            "url": database_url,
            "tenant": TENANT,
            "keys": keys,
            "fee_minor": fee_minor,
            "hold": hold,
            "start_at_ns": start_at_ns,
        }
        self.process = subprocess.Popen(
            [sys.executable, str(BOOKER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def next(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT_S)
        except queue.Empty:
            self.process.kill()
            self.process.wait(timeout=LINE_TIMEOUT_S)
            raise AssertionError(f"the booker said nothing for {LINE_TIMEOUT_S} s: {self.stderr()}") from None
        found: dict[str, Any] = json.loads(line)
        return found

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        returncode = self.process.wait(timeout=LINE_TIMEOUT_S)
        assert returncode == 0, self.stderr()

    def stderr(self) -> str:
        assert self.process.stderr is not None and self.process.poll() is not None
        return self.process.stderr.read()

    def close(self) -> None:
        """Kill it if it still runs, and close its pipes (once its output is read)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=LINE_TIMEOUT_S)
        self.reader.join(timeout=LINE_TIMEOUT_S)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def wait_until_blocked_on_a_lock(database: Database, pid: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_TIMEOUT_S
    while time.monotonic() < deadline:
        with database.read() as connection:
            waiting = connection.execute(
                text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one_or_none()
        if waiting == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited on a lock")


@pytest.mark.parametrize(("first_ends", "second_books"), [("commit", False), ("rollback", True)])
def test_a_second_process_waits_for_the_first_and_books_only_if_it_rolled_back(
    database: Database, database_url: str, backend: str, first_ends: str, second_books: bool
) -> None:
    """PostgreSQL, two processes: the second reaches the key while the first holds it
    uncommitted, waits on the key's unique index, and then books nothing (the first
    committed) or books it (the first rolled back). Exactly once, never zero times."""
    if backend != "postgres":
        pytest.skip("a lock wait between two connections: SQLite's single writer orders whole transactions")
    assert book(database, "settlement-fee:ch_warm", 5) is True  # the accounts exist: the wait is on the key
    key = "settlement-fee:ch_race"
    first = Booker(database_url, [key], 320, hold=True)
    second: Booker | None = None
    try:
        assert first.next()["pid"] > 0
        assert first.next() == {"booked": [key]}
        second = Booker(database_url, [key], 320, hold=True)
        pid = second.next()["pid"]
        wait_until_blocked_on_a_lock(database, pid)
        first.tell(first_ends)
        assert first.next() == {"done": first_ends}
        first.finish()
        assert second.next() == {"booked": [key] if second_books else []}
        second.tell("commit")
        assert second.next() == {"done": "commit"}
        second.finish()
    finally:
        first.close()
        if second is not None:
            second.close()
    assert booked(database, [key, "settlement-fee:ch_warm"]) == {key: 320, "settlement-fee:ch_warm": 5}
    assert posted(database, "processor.fees.USD") == (325, 0, 325)
    assert posted(database, "processor.clearing.USD") == (0, 325, -325)
    assert_books_hold(database)


def start_together(database_url: str, key_lists: list[list[str]]) -> list[list[str]]:
    """One booker per list of keys, all starting at one instant; the keys each booked."""
    start_at_ns = time.time_ns() + 1_500_000_000  # every booker is up by then
    bookers = [Booker(database_url, keys, 320, hold=False, start_at_ns=start_at_ns) for keys in key_lists]
    try:
        answers = []
        for booker in bookers:
            assert "pid" in booker.next()
            answers.append(booker.next()["booked"])
            assert booker.next() == {"done": "commit"}
            booker.finish()
    finally:
        for booker in bookers:
            booker.close()
    return answers


def test_processes_booking_one_key_at_once_book_it_once(database: Database, database_url: str) -> None:
    key = "settlement-fee:ch_together"
    answers = start_together(database_url, [[key]] * BOOKERS)
    assert sorted(answers) == [[]] * (BOOKERS - 1) + [[key]]
    assert booked(database, [key]) == {key: 320}
    assert posted(database, "processor.fees.USD") == (320, 0, 320)
    assert_books_hold(database)


def test_processes_booking_overlapping_chunks_at_once_book_each_key_once(database: Database, database_url: str) -> None:
    """Chunks given in different orders: each call inserts its keys in key order, so two calls
    never wait on each other's keys crosswise (no deadlock, no retry)."""
    keys = [f"settlement-fee:ch_{number:03}" for number in range(200)]
    chunks = [keys[:150], list(reversed(keys[50:])), keys[::2] + keys[1::2], keys[100:] + keys[:100]]
    answers = start_together(database_url, chunks)
    every = [key for answer in answers for key in answer]
    assert sorted(every) == keys  # each key booked by exactly one process
    assert all(set(answer) <= set(chunk) for answer, chunk in zip(answers, chunks, strict=True))
    assert booked(database, keys) == dict.fromkeys(keys, 320)
    assert posted(database, "processor.fees.USD") == (200 * 320, 0, 200 * 320)
    assert_books_hold(database)
