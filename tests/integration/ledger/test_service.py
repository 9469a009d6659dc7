"""The ledger's service functions inside `Database.transaction`, and `verify`, on both databases."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.kit.errors import InvalidAmount, UnsupportedCurrency
from paycore.ledger import repository
from paycore.ledger import service as ledger
from paycore.ledger.errors import (
    AccountNotFound,
    BalanceLimitExceeded,
    BalanceOverflow,
    CurrencyMismatch,
    InsufficientFunds,
    InvalidEntries,
    TransferExpired,
    TransferNotFound,
    TransferNotPending,
    TransferNotReversible,
    UnbalancedTransfer,
)
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify

T = TypeVar("T")
TENANT = "t1"
PAYCORE = Path(sys.executable).with_name("paycore")


def run(database: Database, work: Callable[[Connection], T]) -> T:
    return database.transaction(work)


def open_account(
    database: Database, code: str, normal_balance: str, *, no_overdraft: bool = False, currency: str = "USD"
) -> str:
    return run(
        database,
        lambda c: (
            ledger.create_account(
                c,
                TENANT,
                code=code,
                currency=currency,
                normal_balance=normal_balance,
                no_overdraft=no_overdraft,
                metadata={},
                now_us=now_us(),
            ).id
        ),
    )


def test_accounts_are_read_by_id_and_by_code_in_any_number(database: Database) -> None:
    # More than one SELECT's worth (repository._ACCOUNTS_PER_STATEMENT_MAX), with a duplicate
    # and an unknown one: each account once, the unknown one absent.
    count = 2 * repository._ACCOUNTS_PER_STATEMENT_MAX + 3
    ids = [open_account(database, f"many.{n}", "credit") for n in range(count)]
    codes = [f"many.{n}" for n in range(count)]
    with database.read() as connection:
        by_id = repository.get_accounts(connection, TENANT, [*ids, ids[0], "acct_unknown"])
        by_code = repository.get_accounts_by_codes(connection, TENANT, [*codes, "many.unknown"])
    assert sorted(by_id) == sorted(ids)
    assert sorted(by_code) == sorted(codes)
    assert all(by_code[f"many.{n}"].id == ids[n] for n in range(count))


def move(
    database: Database, *legs: tuple[str, str, int], pending: bool = False, expires_at_us: int | None = None
) -> str:
    spec = TransferSpec(entries=tuple(EntrySpec(*leg) for leg in legs), pending=pending, expires_at_us=expires_at_us)
    return run(database, lambda c: ledger.create_transfer(c, TENANT, spec, now_us=now_us()).id)


def balance(database: Database, account_id: str) -> tuple[int, int, int]:
    with database.read() as connection:
        b = ledger.get_account(connection, TENANT, account_id).balance
    return b.posted_minor, b.pending_minor, b.available_minor


def status(database: Database, transfer_id: str) -> str:
    with database.read() as connection:
        return ledger.get_transfer(connection, TENANT, transfer_id).status


def counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return repository.count_rows(connection)


def verified(database: Database) -> list[str]:
    with database.read() as connection:
        return verify(connection).problems


@pytest.fixture
def books(database: Database) -> dict[str, str]:
    """cash (debit-normal) funded `wallet` (credit-normal, no_overdraft) with 1000."""
    accounts = {
        "cash": open_account(database, "cash", "debit"),
        "wallet": open_account(database, "wallet", "credit", no_overdraft=True),
        "shop": open_account(database, "shop", "credit", no_overdraft=True),
    }
    move(database, (accounts["cash"], "debit", 1000), (accounts["wallet"], "credit", 1000))
    return accounts


# ---------------------------------------------------------------------------- rules


def test_refusals_raise_typed_errors_and_write_nothing(database: Database, books: dict[str, str]) -> None:
    euro = open_account(database, "euro", "credit", currency="EUR")
    before = counts(database)
    refusals: list[tuple[type[Exception], tuple[tuple[str, str, int], ...], str | None]] = [
        (InsufficientFunds, ((books["wallet"], "debit", 1001), (books["shop"], "credit", 1001)), None),
        (UnbalancedTransfer, ((books["cash"], "debit", 10), (books["shop"], "credit", 9)), None),
        (UnbalancedTransfer, ((books["cash"], "debit", 10), (euro, "credit", 10)), None),
        (CurrencyMismatch, ((books["cash"], "debit", 10), (euro, "credit", 10)), "USD"),
        (AccountNotFound, ((books["cash"], "debit", 10), ("acct_nope", "credit", 10)), None),
        (InvalidEntries, ((books["cash"], "debit", 10),), None),
        (
            InvalidAmount,
            (
                (books["cash"], "debit", 2**53 - 1),
                (books["cash"], "debit", 1),
                (books["shop"], "credit", 2**53 - 1),
                (books["shop"], "credit", 1),
            ),
            None,
        ),
    ]
    for error, legs, currency in refusals:
        spec = TransferSpec(entries=tuple(EntrySpec(*leg) for leg in legs), currency=currency)
        with pytest.raises(error):
            run(database, lambda c: ledger.create_transfer(c, TENANT, spec, now_us=now_us()))  # noqa: B023
    assert counts(database) == before
    assert verified(database) == []


def test_a_refusal_inside_a_savepoint_leaves_the_transaction_clean(database: Database, books: dict[str, str]) -> None:
    """The idempotency layer rolls a refused effect back to a savepoint and commits the rest:
    the cached totals the refused transfer had already updated must be rolled back too."""
    legs = (EntrySpec(books["shop"], "credit", 600), EntrySpec(books["wallet"], "debit", 600))
    spec = TransferSpec(entries=(*legs, *legs))

    def work(connection: Connection) -> None:
        with pytest.raises(InsufficientFunds), connection.begin_nested():
            ledger.create_transfer(connection, TENANT, spec, now_us=now_us())
        ledger.create_transfer(connection, TENANT, TransferSpec(entries=legs), now_us=now_us())

    run(database, work)
    assert balance(database, books["wallet"]) == (400, 0, 400)
    assert balance(database, books["shop"]) == (600, 0, 600)
    assert verified(database) == []


def test_debit_normal_accounts_are_the_mirror(database: Database) -> None:
    """A debit-normal no_overdraft account (an asset that may not go below zero)."""
    equity = open_account(database, "equity", "credit")
    bank = open_account(database, "bank", "debit", no_overdraft=True)
    move(database, (bank, "debit", 500), (equity, "credit", 500))
    assert balance(database, bank) == (500, 0, 500)
    move(database, (equity, "debit", 200), (bank, "credit", 200), pending=True)
    assert balance(database, bank) == (500, -200, 300)
    with pytest.raises(InsufficientFunds):
        move(database, (equity, "debit", 301), (bank, "credit", 301))
    move(database, (equity, "debit", 300), (bank, "credit", 300))
    assert balance(database, bank) == (200, -200, 0)


def test_two_phase_at_the_service_level(database: Database, books: dict[str, str]) -> None:
    wallet, shop = books["wallet"], books["shop"]
    hold = move(database, (wallet, "debit", 300), (shop, "credit", 300), pending=True)
    assert status(database, hold) == "pending"
    posted = run(
        database, lambda c: ledger.post_pending(c, TENANT, hold, amount_minor=100, now_us=now_us(), owner_id=None)
    )
    assert posted.status == "posted" and posted.posted_minor == 100 and posted.resolved_by is not None
    assert balance(database, wallet) == (900, 0, 900)
    with pytest.raises(TransferNotPending):
        run(database, lambda c: ledger.void_pending(c, TENANT, hold, now_us=now_us(), owner_id=None))
    with pytest.raises(TransferNotFound):
        run(database, lambda c: ledger.void_pending(c, TENANT, "txn_nope", now_us=now_us(), owner_id=None))
    with pytest.raises(TransferNotFound):  # another tenant's transfer does not exist for you
        run(database, lambda c: ledger.void_pending(c, "t2", hold, now_us=now_us(), owner_id=None))
    assert verified(database) == []


def test_expiry_at_the_service_level(database: Database, books: dict[str, str]) -> None:
    wallet, shop = books["wallet"], books["shop"]
    start = now_us()
    holds = [
        move(database, (wallet, "debit", 10), (shop, "credit", 10), pending=True, expires_at_us=start + i)
        for i in range(1, 6)
    ]
    with pytest.raises(TransferExpired):
        run(
            database,
            lambda c: ledger.post_pending(c, TENANT, holds[0], amount_minor=None, now_us=start + 1, owner_id=None),
        )
    # Bounded rounds: the earliest expiries go first.
    assert run(database, lambda c: ledger.expire_due(c, now_us=start + 5, limit=2)) == 2
    assert [status(database, h) for h in holds] == ["expired", "expired", "pending", "pending", "pending"]
    assert run(database, lambda c: ledger.expire_due(c, now_us=start + 3, limit=10)) == 1
    assert run(database, lambda c: ledger.expire_due(c, now_us=start + 100, limit=10)) == 2
    assert run(database, lambda c: ledger.expire_due(c, now_us=start + 100, limit=10)) == 0
    assert balance(database, wallet) == (1000, 0, 1000)
    assert verified(database) == []


def test_reversal_rules(database: Database, books: dict[str, str]) -> None:
    wallet, shop = books["wallet"], books["shop"]
    plain = move(database, (wallet, "debit", 100), (shop, "credit", 100))
    reversal = run(database, lambda c: ledger.reverse_transfer(c, TENANT, plain, now_us=now_us(), owner_id=None))
    assert reversal.reverses_id == plain
    with pytest.raises(TransferNotReversible):
        run(database, lambda c: ledger.reverse_transfer(c, TENANT, plain, now_us=now_us(), owner_id=None))
    # A reversal is a transfer like any other: it can itself be reversed, once.
    run(database, lambda c: ledger.reverse_transfer(c, TENANT, reversal.id, now_us=now_us(), owner_id=None))
    assert balance(database, shop) == (100, 0, 100)
    hold = move(database, (wallet, "debit", 50), (shop, "credit", 50), pending=True)
    with pytest.raises(TransferNotReversible):
        run(database, lambda c: ledger.reverse_transfer(c, TENANT, hold, now_us=now_us(), owner_id=None))
    assert verified(database) == []


def test_ensure_account_is_get_or_create(database: Database) -> None:
    def ensure(connection: Connection) -> str:
        return ledger.ensure_account(
            connection, TENANT, code="x", currency="USD", normal_balance="debit", no_overdraft=False, now_us=now_us()
        ).id

    assert run(database, ensure) == run(database, ensure)
    with pytest.raises(UnsupportedCurrency):
        run(
            database,
            lambda c: ledger.create_account(
                c, TENANT, code="y", currency="XXX", normal_balance="debit", no_overdraft=False, metadata={}, now_us=0
            ),
        )


def test_balance_overflow_is_refused_at_exactly_the_64_bit_edge(database: Database) -> None:
    """Totals live in signed 64-bit columns: reaching 2^63-1 is fine, one more is refused
    (not a database error, not a silent float on SQLite). The totals are set by hand to get
    to the edge quickly, so this ledger does not verify; only the refusal is under test. The
    sink's debits are set 1,000 below its credits: its balance stays under the 2^53 - 1 limit
    (balance_limit_exceeded, tested below) while its credits total reaches the 64-bit edge."""
    source = open_account(database, "source", "debit")
    sink = open_account(database, "sink", "credit")
    edge = 2**63 - 1
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text(
                "UPDATE ledger_accounts SET credits_posted_minor = :total, debits_posted_minor = :total - 1000"
                " WHERE id = :id"
            ),
            {"total": edge - 10, "id": sink},
        )
        # The source gives up to 2^53 - 1 below; its credits start there so its balance stays in range.
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE id = :id"),
            {"total": 2**53 - 1, "id": source},
        )
    move(database, (source, "debit", 10), (sink, "credit", 10))
    assert credits_total(database, sink) == edge
    assert balance(database, sink)[0] == 1_010
    before = counts(database)
    for amount in (1, 2**53 - 1):
        with pytest.raises(BalanceOverflow):
            move(database, (source, "debit", amount), (sink, "credit", amount))
    assert counts(database) == before
    # A hold counts in the pending columns, which have room; posting it would pass the edge.
    hold = move(database, (source, "debit", 1), (sink, "credit", 1), pending=True)
    before = counts(database)
    with pytest.raises(BalanceOverflow):
        run(database, lambda c: ledger.post_pending(c, TENANT, hold, amount_minor=None, now_us=now_us(), owner_id=None))
    assert counts(database) == before
    assert status(database, hold) == "pending"
    run(database, lambda c: ledger.void_pending(c, TENANT, hold, now_us=now_us(), owner_id=None))
    assert balance(database, sink) == (1_010, 0, 1_010)
    assert credits_total(database, sink) == edge
    # Money can still leave the full account.
    move(database, (sink, "debit", 5), (source, "credit", 5))
    assert balance(database, sink)[0] == 1_005


def credits_total(database: Database, account_id: str) -> int:
    with database.read() as connection:
        total = connection.execute(
            text("SELECT credits_posted_minor FROM ledger_accounts WHERE id = :id"), {"id": account_id}
        ).scalar_one()
    return int(total)


HALF_PLUS_ONE = (2**53 - 1) // 2 + 1  # issue 18: two credits of this reached 9007199254740992


def test_a_balance_past_2_53_minus_1_is_refused_whole(database: Database) -> None:
    """The API's balances are JSON integers: past 2^53 - 1 a JavaScript client reads them
    wrong. The second of two credits of (2^53 - 1) / 2 + 1 is refused and writes nothing."""
    source = open_account(database, "source", "debit")
    sink = open_account(database, "sink", "credit")
    move(database, (source, "debit", HALF_PLUS_ONE), (sink, "credit", HALF_PLUS_ONE))
    before = counts(database)
    with pytest.raises(BalanceLimitExceeded) as refused:
        move(database, (source, "debit", HALF_PLUS_ONE), (sink, "credit", HALF_PLUS_ONE))
    assert refused.value.code == "balance_limit_exceeded"
    assert counts(database) == before
    assert balance(database, sink)[0] == HALF_PLUS_ONE
    # Exactly up to the limit is fine, for the credit side and the debit side.
    rest = 2**53 - 1 - HALF_PLUS_ONE
    move(database, (source, "debit", rest), (sink, "credit", rest))
    assert balance(database, sink)[0] == 2**53 - 1
    assert balance(database, source)[0] == 2**53 - 1
    # A hold whose post would pass the limit is refused when it is created: a post is often
    # money the processor already moved, and must never be refused later.
    before = counts(database)
    with pytest.raises(BalanceLimitExceeded) as refused:
        move(database, (source, "debit", 1), (sink, "credit", 1), pending=True)
    assert "posted plus incoming holds" in str(refused.value)
    assert counts(database) == before
    # Money moving a balance back toward zero is never refused.
    move(database, (sink, "debit", 5), (source, "credit", 5))
    assert balance(database, sink)[0] == 2**53 - 6
    # Holds that fit are posted whatever else happened meanwhile: the projected balance bounds them.
    hold = move(database, (source, "debit", 5), (sink, "credit", 5), pending=True)
    run(database, lambda c: ledger.post_pending(c, TENANT, hold, amount_minor=None, now_us=now_us(), owner_id=None))
    assert balance(database, sink)[0] == 2**53 - 1


def test_an_account_already_past_the_limit_may_shrink_but_not_grow(database: Database) -> None:
    """Old data (or an operator's hand edit) may hold a balance past 2^53 - 1: it can be
    brought back, never carried further."""
    source = open_account(database, "source", "debit")
    sink = open_account(database, "sink", "credit")
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE id = :id"),
            {"total": 2**53 + 10, "id": sink},
        )
    with pytest.raises(BalanceLimitExceeded):
        move(database, (source, "debit", 1), (sink, "credit", 1))
    move(database, (sink, "debit", 3), (source, "credit", 3))
    assert balance(database, sink)[0] == 2**53 + 7


def test_releasing_a_hold_is_never_refused_by_the_balance_limit(database: Database) -> None:
    """A void (or an expiry) moves no money: on an account already past 2^53 - 1 it raises the
    available balance back to posted, and must still go through (the expiry job voids holds
    in batches: one refusal would stall them all)."""
    source = open_account(database, "source", "debit")
    sink = open_account(database, "sink", "credit")
    move(database, (source, "debit", 100), (sink, "credit", 100))
    hold = move(database, (sink, "debit", 5), (source, "credit", 5), pending=True)
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE id = :id"),
            {"total": 2**53 + 10, "id": sink},
        )
    run(database, lambda c: ledger.void_pending(c, TENANT, hold, now_us=now_us(), owner_id=None))
    assert status(database, hold) == "voided"
    assert balance(database, sink) == (2**53 + 10, 0, 2**53 + 10)


def test_an_account_known_only_to_a_rolled_back_transaction_moves_no_money(
    database: Database, books: dict[str, str]
) -> None:
    """Accounts' facts are cached per process (ADR 0007); an account created and read in a
    transaction that rolled back is in that cache, but never in the database: a transfer to
    it must be refused as not found, whatever the cache says."""

    class Abandon(Exception):
        pass

    created: list[str] = []

    def abandoned(connection: Connection) -> None:
        ghost = ledger.create_account(
            connection, TENANT, code="ghost", currency="USD", normal_balance="credit",
            no_overdraft=False, metadata={}, now_us=now_us(),
        )  # fmt: skip
        created.append(ghost.id)
        spec = TransferSpec(entries=(EntrySpec(books["cash"], "debit", 5), EntrySpec(ghost.id, "credit", 5)))
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us())  # caches the ghost's facts
        raise Abandon

    with pytest.raises(Abandon):
        run(database, abandoned)
    before = counts(database)
    with pytest.raises(AccountNotFound):
        move(database, (books["cash"], "debit", 5), (created[0], "credit", 5))
    with pytest.raises(AccountNotFound):
        move(database, (created[0], "debit", 5), (books["cash"], "credit", 5))
    assert counts(database) == before
    assert verified(database) == []


def test_a_transfer_with_more_entries_than_one_insert_statement_holds(database: Database) -> None:
    """Entries are inserted 64 rows per statement: 150 entries take three statements and
    still number each account's entries 1, 2, 3, ... in order."""
    source = open_account(database, "source", "debit")
    sinks = [open_account(database, f"sink{index}", "credit") for index in range(3)]
    legs = [(source, "debit", 1)] * 75 + [(sinks[index % 3], "credit", 1) for index in range(75)]
    transfer_id = move(database, *legs)
    with database.read() as connection:
        transfer = ledger.get_transfer(connection, TENANT, transfer_id)
        statement, _ = ledger.list_entries(connection, TENANT, source, limit=100, starting_after=None)
    assert len(transfer.entries) == 150
    assert [entry.account_sequence for entry in statement] == list(range(1, 76))
    assert balance(database, sinks[0]) == (25, 0, 25)
    assert verified(database) == []


# ---------------------------------------------------------------------------- verify


def test_verify_counts_a_healthy_ledger(database: Database, books: dict[str, str]) -> None:
    with database.read() as connection:
        report = verify(connection)
    assert report.ok and report.problems == []
    assert (report.accounts, report.transfers, report.entries) == (3, 1, 2)


def test_verify_reports_tampered_cached_totals(database: Database, books: dict[str, str]) -> None:
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = credits_posted_minor + 1 WHERE id = :id"),
            {"id": books["shop"]},
        )
    problems = verified(database)
    assert any(books["shop"] in problem and "cached totals" in problem for problem in problems), problems
    assert any("USD does not sum to zero" in problem for problem in problems), problems


def test_verify_reports_an_unbalanced_transfer_and_a_foreign_currency_entry(
    database: Database, books: dict[str, str]
) -> None:
    """Written around every guard (triggers off on PostgreSQL), as only a bug or an intruder could."""
    with database.engine.connect() as connection, connection.begin():
        if database.is_postgres:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
        connection.execute(
            text(
                "INSERT INTO ledger_transfers (tenant_id, id, kind, reference_type, metadata, created_at_us)"
                " VALUES (:tenant, 'txn_bad', 'transfer', 'adjustment', '{}', 1)"
            ),
            {"tenant": TENANT},
        )
        connection.execute(
            text(
                "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                " currency, account_sequence, created_at_us)"
                " VALUES (:tenant, 'ent_bad', 'txn_bad', :account, 'debit', 5, 'EUR', 999999, 1)"
            ),
            {"tenant": TENANT, "account": books["cash"]},
        )
    problems = verified(database)
    assert any("txn_bad is unbalanced in EUR by 5" in problem for problem in problems), problems
    assert any("ent_bad is in EUR" in problem for problem in problems), problems


def run_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAYCORE_DATABASE_URL": database_url}
    return subprocess.run([str(PAYCORE), *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_cli_ledger_verify_exits_non_zero_on_a_broken_ledger(
    database: Database, database_url: str, books: dict[str, str]
) -> None:
    healthy = run_cli(database_url, "ledger", "verify")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "ledger verified" in healthy.stdout
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE ledger_accounts SET debits_posted_minor = 7 WHERE id = :id"), {"id": books["wallet"]}
        )
    broken = run_cli(database_url, "ledger", "verify")
    assert broken.returncode == 1
    assert "FAILED" in broken.stdout and books["wallet"] in broken.stdout
