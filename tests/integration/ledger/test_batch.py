"""`ledger.create_batch` written at once (issue 31; `paycore.ledger.batch`, migration 0019): all
or nothing at 8,000 transfers, the error naming the transfer; a fixed number of statements
per batch on PostgreSQL; and the function's limits held to the reference path's on the same
cases (`create_transfer`, one transfer at a time)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, text

from paycore.db import observers
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError
from paycore.ledger import accounts as accounts_module
from paycore.ledger import repository
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound, InsufficientFunds
from paycore.ledger.limits import BALANCE_LIMIT_MINOR, TOTAL_MINOR_MAX
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify
from tests.integration.plans.explain import AUTO_EXPLAIN, explained

T = TypeVar("T")
TENANT = "t_batch"
BIG_BATCH = 8_000


def _account(connection: Connection, code: str, normal: str, *, no_overdraft: bool = False) -> str:
    return ledger.create_account(
        connection, TENANT, code=code, currency="USD", normal_balance=normal, no_overdraft=no_overdraft,
        metadata={}, now_us=now_us(),
    ).id  # fmt: skip


def _fund(database: Database, destination: str, amount_minor: int) -> None:
    def work(connection: Connection) -> None:
        source = _account(connection, f"funding.{destination}", "debit")
        spec = TransferSpec((EntrySpec(source, "debit", amount_minor), EntrySpec(destination, "credit", amount_minor)))
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us())

    database.transaction(work)


def _move(source: str, destination: str, amount_minor: int = 1, *, pending: bool = False) -> TransferSpec:
    entries = (EntrySpec(source, "debit", amount_minor), EntrySpec(destination, "credit", amount_minor))
    return TransferSpec(entries, pending=pending, currency="USD")


def _batch(database: Database, specs: list[TransferSpec]) -> tuple[str, list[ledger.Transfer]]:
    return database.transaction(
        lambda connection: ledger.create_batch(connection, TENANT, specs, now_us=now_us(), idempotency_key=None)
    )


def _books(database: Database) -> tuple[dict[str, int], list[Any]]:
    with database.read() as connection:
        balances = connection.execute(
            text("SELECT id, debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,"
                 " entries_count FROM ledger_accounts ORDER BY id")
        ).all()  # fmt: skip
        return repository.count_rows(connection), list(balances)


@pytest.fixture
def wallets(database: Database) -> tuple[str, str]:
    """A no-overdraft wallet holding BIG_BATCH - 1 and a merchant account."""
    wallet, merchant = database.transaction(
        lambda c: (_account(c, "wallet", "credit", no_overdraft=True), _account(c, "merchant", "credit"))
    )
    _fund(database, wallet, BIG_BATCH - 1)
    return wallet, merchant


def test_a_batch_of_8000_is_written_whole(database: Database, wallets: tuple[str, str]) -> None:
    wallet, merchant = wallets
    specs = [_move(wallet, merchant) for _ in range(BIG_BATCH - 2)] + [_move(merchant, wallet, 5, pending=True)] * 2
    batch_id, created = _batch(database, specs)
    assert len(created) == BIG_BATCH and all(transfer.batch_id == batch_id for transfer in created)
    with database.read() as connection:
        assert ledger.get_account(connection, TENANT, wallet).balance.available_minor == 1
        stored = ledger.get_transfer(connection, TENANT, created[-1].id)
        assert stored == created[-1]
        # Each account's entries are numbered 1, 2, ... in the batch's order, as the reference path does.
        for account_id, count in ((merchant, BIG_BATCH), (wallet, 1 + BIG_BATCH)):  # wallet: its funding first
            sequences = [
                entry.account_sequence
                for transfer in created
                for entry in transfer.entries
                if entry.account_id == account_id
            ]
            assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
            assert sequences[-1] == count
        assert verify(connection).ok


@pytest.mark.parametrize("refusal", ["insufficient_funds", "account_not_found"])
def test_a_bad_transfer_last_in_8000_writes_nothing(database: Database, wallets: tuple[str, str], refusal: str) -> None:
    wallet, merchant = wallets
    specs = [_move(wallet, merchant) for _ in range(BIG_BATCH - 1)]
    # The wallet holds BIG_BATCH - 1: one more unit is one too many; or an account that does not exist.
    specs.append(_move(wallet, merchant) if refusal == "insufficient_funds" else _move("acct_gone", merchant))
    before = _books(database)
    with pytest.raises((InsufficientFunds, AccountNotFound)) as raised:
        _batch(database, specs)
    error = raised.value
    assert isinstance(error, DomainError) and error.code == refusal
    expected = "transfers[7999].entries" + ("" if refusal == "insufficient_funds" else "[0].account_id")
    assert error.param == expected
    assert _books(database) == before


def test_the_earlier_refusal_is_reported_first(database: Database, wallets: tuple[str, str]) -> None:
    """Transfer 1 overdraws, transfer 2 names an unknown account: the reference path, going in
    order, refused transfer 1; so does the batch, though it checks accounts first."""
    wallet, merchant = wallets
    specs = [_move(wallet, merchant), _move(wallet, merchant, BIG_BATCH), _move("acct_gone", merchant)]
    with pytest.raises(InsufficientFunds) as raised:
        _batch(database, specs)
    assert raised.value.param == "transfers[1].entries"


@contextmanager
def _statements(database: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def listen(statement: str, *_: Any) -> None:
        seen.append(statement)

    with observers.observing(database.engine, listen):
        yield seen


# A batch on PostgreSQL: the accounts' facts (none when this process has them), the one call.
STATEMENTS_PER_BATCH_MAX = 2


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("size", [1, 100, 1000])
def test_a_batch_costs_a_fixed_number_of_statements(
    database: Database, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = database.transaction(lambda c: [_account(c, f"a{index}", "credit") for index in range(4)])
    specs = [_move(accounts[index % 4], accounts[(index + 1) % 4]) for index in range(size)]

    monkeypatch.setattr(accounts_module, "_FACTS", accounts_module._FactsCache(10))  # the worst case: none cached

    def work(connection: Connection) -> None:
        with _statements(database) as seen:
            ledger.create_batch(connection, TENANT, specs, now_us=now_us(), idempotency_key=None)
        assert len(seen) <= STATEMENTS_PER_BATCH_MAX, seen

    database.transaction(work)


# Transfers in the plan test's batch.
PLANNED_BATCH = 37


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_entries_read_no_constant_text_array_by_subscript(database: Database) -> None:
    """Migration 0047: a statement planned for the batch's values (a custom plan, as every PL/pgSQL
    statement's first five runs in a session are, and every run on Citus) has the batch's arrays
    as constants, and a constant `text[]` is read from its first element for each subscript:
    O(entries x transfers) for the entries' transfer ids. The entries' INSERT must take them by
    a join instead: no output of its plan subscripts a constant text array."""
    wallet, merchant = database.transaction(lambda c: (_account(c, "w", "credit"), _account(c, "m", "credit")))
    specs = [_move(merchant, wallet) for _ in range(PLANNED_BATCH)]
    plans: list[dict[str, Any]] = []

    def work(connection: Connection) -> None:
        raw = connection.connection.driver_connection
        assert raw is not None
        for setting in (*AUTO_EXPLAIN, "SET auto_explain.log_verbose = on", "SET plan_cache_mode = force_custom_plan"):
            raw.execute(setting)
        handler = lambda notice: plans.append(explained(str(notice.message_primary or "")) or {})  # noqa: E731
        raw.add_notice_handler(handler)
        try:
            ledger.create_batch(connection, TENANT, specs, now_us=now_us(), idempotency_key=None)
        finally:
            raw.remove_notice_handler(handler)
            raw.execute("RESET ALL")  # the pooled connection as it was

    database.transaction(work)
    [insert] = [
        plan for plan in plans if str(plan.get("Query Text", "")).lstrip().startswith("INSERT INTO ledger_entries")
    ]
    outputs = [output for node in _plan_nodes(insert["Plan"]) for output in node.get("Output", ())]
    assert outputs, insert  # verbose: every node's output listed
    subscripted = [output for output in outputs if "::text[])[" in output]
    assert not subscripted, subscripted


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _limit_cases() -> list[tuple[str, tuple[int, int, int, int], EntrySpec, bool]]:
    """(normal balance, the account's totals, an entry on it, pending) around the limits."""
    rng = random.Random(31)
    near = [0, 1, 5, BALANCE_LIMIT_MINOR - 5, BALANCE_LIMIT_MINOR, BALANCE_LIMIT_MINOR + 1, TOTAL_MINOR_MAX - 3]
    cases = []
    for _ in range(80):
        a, b, c, d = (min(rng.choice(near) + rng.randrange(0, 4), TOTAL_MINOR_MAX) for _ in range(4))
        totals = (a, b, c, d)
        amount = rng.choice((1, 3, 6, BALANCE_LIMIT_MINOR))
        entry = EntrySpec("x", rng.choice(("debit", "credit")), amount)
        cases.append((rng.choice(("credit", "debit")), totals, entry, rng.random() < 0.4))
    return cases


class _Rollback(Exception):
    pass


def _outcome(database: Database, case: Any, write: Callable[[Connection, TransferSpec], Any]) -> str:
    normal, totals, entry, pending = case

    def work(connection: Connection) -> str:
        account = _account(connection, "x", normal, no_overdraft=True)
        other = _account(connection, "other", "debit" if normal == "credit" else "credit")
        connection.execute(
            text("UPDATE ledger_accounts SET debits_posted_minor = :a, credits_posted_minor = :b,"
                 " debits_pending_minor = :c, credits_pending_minor = :d WHERE id = :id"),
            {"a": totals[0], "b": totals[1], "c": totals[2], "d": totals[3], "id": account},
        )  # fmt: skip
        flipped = "credit" if entry.direction == "debit" else "debit"
        entries = (
            EntrySpec(account, entry.direction, entry.amount_minor),
            EntrySpec(other, flipped, entry.amount_minor),
        )
        try:
            write(connection, TransferSpec(entries, pending=pending))
            found = "written"
        except DomainError as error:
            found = f"{error.code} {error.param} {str(error).replace(account, 'X').replace(other, 'O')}"
        raise _Rollback(found)

    with pytest.raises(_Rollback) as rolled_back:
        database.transaction(work)
    return str(rolled_back.value)


def test_the_batch_refuses_what_one_transfer_at_a_time_refuses(database: Database) -> None:
    """The limits of the batch path (the function's copy on PostgreSQL, `batch._checked` on
    SQLite) against the reference path's (`postings._apply`) on the same cases."""

    def one(connection: Connection, spec: TransferSpec) -> None:
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us(), param_prefix="transfers[0].")

    def batched(connection: Connection, spec: TransferSpec) -> None:
        ledger.create_batch(connection, TENANT, [spec], now_us=now_us(), idempotency_key=None)

    outcomes = set()
    for case in _limit_cases():
        reference = _outcome(database, case, one)
        assert _outcome(database, case, batched) == reference, case
        outcomes.add(reference.split(" ")[0])
    assert outcomes == {"written", "balance_overflow", "balance_limit_exceeded", "insufficient_funds"}
