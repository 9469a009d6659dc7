"""What the ledger's data-plane tests share (tests/integration/ledger/test_transfer_* and
test_batch_*): one tenant's books opened alike, the rows a tenant's writes left made comparable
across tenants, the check that a write left to the reference path wrote nothing, and processes
racing on one hot wallet."""

from __future__ import annotations

import json
import multiprocessing
import re
from collections.abc import Callable
from typing import Any

from paycore.db.engine import Database
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from tests.support.rows import named_rows, row_counts

NOW_US = 1_700_000_000_000_000
# code: (currency, normal balance, no_overdraft)
ACCOUNTS = {
    "cash": ("USD", "debit", False),
    "wallet": ("USD", "credit", True),
    "merchant": ("USD", "credit", False),
    "fees": ("USD", "credit", False),
    "eur.cash": ("EUR", "debit", False),
    "eur.wallet": ("EUR", "credit", False),
    "ceiling": ("USD", "credit", False),  # funded from "source" to 5 below 2^53 - 1
    "source": ("USD", "debit", False),
}
Leg = tuple[str, str, int]  # (account code, direction, amount_minor)
# An answer's new ids: a transfer's, an entry's, a batch's.
_NEW_ID = re.compile(r'"(txn|ent|batch)_[0-9A-Za-z]+"')


# Transfers of every shape the data plane writes (several entries to one account, a hold with
# its expiry and metadata, two currencies, a reference, metadata that looks like a sequence
# number in the answer): each compared, row for row, with the reference path's.
CASES: list[tuple[list[Leg], dict[str, Any]]] = [
    ([("wallet", "debit", 300), ("merchant", "credit", 300)], {}),
    ([("wallet", "debit", 10), ("wallet", "debit", 5), ("merchant", "credit", 12), ("fees", "credit", 3)], {}),
    (
        [("wallet", "debit", 200), ("merchant", "credit", 200)],
        {"pending": True, "expires_at_us": 4_102_444_800_000_000, "metadata": {"order": "o-1"}},
    ),
    (
        [("merchant", "debit", 7), ("fees", "credit", 7), ("eur.wallet", "credit", 9), ("eur.cash", "debit", 9)],
        {"reference_type": "adjustment", "reference_id": "adj_1"},
    ),
    ([("cash", "debit", 5), ("ceiling", "credit", 5)], {"currency": "USD"}),
    ([("wallet", "debit", 1), ("merchant", "credit", 1)], {"metadata": {"x": '","account_sequence":0,"'}}),
]


def open_books(database: Database, tenant: str, wallet_minor: int = 1_000) -> dict[str, str]:
    """The tenant's accounts by code; the wallet funded from cash (by the reference path)."""

    def work(connection: Any) -> dict[str, str]:
        found = {}
        for code, (currency, normal, no_overdraft) in ACCOUNTS.items():
            account = ledger.create_account(
                connection,
                tenant,
                code=code,
                currency=currency,
                normal_balance=normal,
                no_overdraft=no_overdraft,
                metadata={},
                now_us=NOW_US,
            )
            found[code] = account.id
        funding = (EntrySpec(found["cash"], "debit", wallet_minor), EntrySpec(found["wallet"], "credit", wallet_minor))
        ledger.create_transfer(connection, tenant, TransferSpec(funding), now_us=NOW_US)
        near = AMOUNT_MINOR_MAX - 5
        funding = (EntrySpec(found["source"], "debit", near), EntrySpec(found["ceiling"], "credit", near))
        ledger.create_transfer(connection, tenant, TransferSpec(funding), now_us=NOW_US)
        return found

    return database.transaction(work)


def rows_of(database: Database, tenant: str) -> dict[str, list[dict[str, Any]]]:
    """Every row a transfer writes for the tenant, in an order both tenants share, with ids
    (and the tenant's) replaced by their order of first appearance, accounts first."""
    queries = {
        "ledger_accounts": "SELECT * FROM ledger_accounts WHERE tenant_id = :t ORDER BY code",
        "ledger_transfers": "SELECT * FROM ledger_transfers WHERE tenant_id = :t ORDER BY created_at_us, id",
        "ledger_entries": (
            "SELECT e.* FROM ledger_entries e JOIN ledger_accounts a ON a.tenant_id = e.tenant_id"
            " AND a.id = e.account_id WHERE e.tenant_id = :t ORDER BY e.created_at_us, a.code, e.account_sequence"
        ),
        "idempotency_keys": 'SELECT * FROM idempotency_keys WHERE tenant_id = :t ORDER BY "key"',
    }
    return named_rows(database, tenant, queries)


def assert_same_rows(database: Database, counts: list[int], mine: str = "plane", theirs: str = "reference") -> None:
    """Tenant `mine` holds the rows tenant `theirs` holds, row for row (ids aside), `counts` of
    them per table (accounts, transfers, entries, keys); and the books verify."""
    found, expected = rows_of(database, mine), rows_of(database, theirs)
    assert [len(rows) for rows in found.values()] == counts
    for table in expected:
        for row, expected_row in zip(found[table], expected[table], strict=True):
            assert row == expected_row, (
                table,
                {k: (v, expected_row[k]) for k, v in row.items() if expected_row[k] != v},
            )
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def normalised(books: dict[str, str], body: str) -> Any:
    """An answer's JSON, its accounts named by code and its new ids masked."""
    for code, account_id in books.items():
        body = body.replace(account_id, f"account:{code}")
    return json.loads(_NEW_ID.sub(r'"\1_*"', body))


def assert_writes_nothing(database: Database, write: Callable[[], Any]) -> None:
    """`write` (a data plane's write alone) leaves the request to the reference path, having
    written nothing: no rows, no key."""
    before = row_counts(database)
    assert write() is None
    assert row_counts(database) == before


def race(url: str, target: Callable[..., None], args: tuple[Any, ...], racers: int) -> list[Any]:
    """Every answer of `racers` spawned processes, each `target(url, *args, index, barrier,
    results)` putting its list of answers on `results`; each process exits 0."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(racers), context.Queue()
    processes = [context.Process(target=target, args=(url, *args, index, barrier, results)) for index in range(racers)]
    for process in processes:
        process.start()
    answers = [answer for _ in processes for answer in results.get(timeout=300)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return answers


def assert_shared_key_made_once(answers: list[tuple[str, int, str, bool]]) -> None:
    """The key every racer sent ("shared") was answered alike everywhere, a success, made once."""
    shared = [(status, body) for key, status, body, _ in answers if key == "shared"]
    assert len(set(shared)) == 1 and shared[0][0] == 201, shared
    assert sum(not replayed for key, *_, replayed in answers if key == "shared") == 1


def assert_wallet_spent(database: Database, tenant: str, wallet_id: str) -> None:
    """The books verify and the hot wallet is spent to zero, never below."""
    with database.read() as connection:
        wallet = ledger.get_account(connection, tenant, wallet_id)
        assert ledger.verify(connection).problems == []
    assert wallet.balance.available_minor == 0 and wallet.balance.posted_minor == 0
