"""A keyed batch of transfers on the data plane (ADR 0026; `ledger.batch_keyed`, migration 0050):
what it costs in SQL, counted (never timed) on each database; that it writes exactly the rows
and the stored answer the reference path (`idempotency.run` around `service.create_batch`)
writes for the same request; that everything but a success written at once is the reference
path's to decide, having written nothing (the key's claim included); and that processes racing
with one key, and on one hot account, make each key's batch once
(`test_batch_across_processes.py`).

Counted as `test_transfer_data_plane.py` counts (every statement the driver runs, a SQLite
group's BEGIN IMMEDIATE included, and every commit), around the write alone, the accounts'
facts cached. Before the data plane (the reference path, counted the same way): on PostgreSQL
the key's claim, the call of `paycore_create_batch` and the key's answer, 3 statements, and a
COMMIT; on SQLite BEGIN IMMEDIATE and 7 (the key's claim, the accounts' read, one UPDATE per
account, the INSERTs, the key's answer) and a commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.ledger import batch_keyed, schemas
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from tests.support.ledger_books import (
    ACCOUNTS,
    NOW_US,
    Leg,
    assert_same_rows,
    assert_writes_nothing,
    normalised,
    open_books,
)
from tests.support.ledger_books import CASES as TRANSFER_CASES
from tests.support.statements import counting

# A batch of transfers between two accounts, the write alone (up to 500 transfers and 64
# entries: one INSERT of each). PostgreSQL: the one call
# (autocommit: no BEGIN, no COMMIT of the client's). SQLite: BEGIN IMMEDIATE, the two accounts'
# totals, the key's claim with its answer, the transfers, the entries, and the group's commit.
STATEMENTS = {"sqlite": 6, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}
Batch = list[tuple[list[Leg], dict[str, Any]]]


def render(batch_id: str, created: Sequence[ledger.Transfer]) -> str:
    """What `POST /v1/transfers/batch` answers (`routers.ledger`)."""
    return dumps({"object": "batch", "id": batch_id, "transfers": [schemas.transfer_json(t) for t in created]})


def builder(books: dict[str, str], transfers: Batch) -> batch_keyed.BuildSpecs:
    specs = [
        TransferSpec(tuple(EntrySpec(books[code], direction, amount) for code, direction, amount in legs), **options)
        for legs, options in transfers
    ]
    return lambda _now_us: specs


def scope(tenant: str, key: str, transfers: Batch, now_us: int = NOW_US) -> idempotency.KeyScope:
    body = [[legs, {name: repr(value) for name, value in options.items()}] for legs, options in transfers]
    fingerprint = idempotency.fingerprint("POST", "/v1/transfers/batch", body)
    return idempotency.KeyScope(tenant, key, fingerprint, now_us=now_us, expires_at_us=None)


def plane(database: Database, key_scope: idempotency.KeyScope, build: batch_keyed.BuildSpecs) -> Any:
    """The data plane's write alone: its outcome, or None where it left the batch to the
    reference path (having written nothing)."""
    write = batch_keyed.create_in_one_call if database.is_postgres else batch_keyed.create_in_statements
    return write(database, key_scope, build, render)


def create(
    database: Database, key_scope: idempotency.KeyScope, build: batch_keyed.BuildSpecs, *, one_call: bool = True
) -> tuple[idempotency.Outcome, bool]:
    return batch_keyed.create_batch(database, key_scope, build, render, render_refusal, one_call=one_call)


def _moves(count: int, amount_minor: int = 3) -> Batch:
    return [([("wallet", "debit", amount_minor), ("merchant", "credit", amount_minor)], {})] * count


@pytest.mark.parametrize("size", [1, 32])
def test_a_batch_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database, size: int) -> None:
    books = open_books(database, "count")
    assert plane(database, scope("count", "first", _moves(1)), builder(books, _moves(1))) is not None  # facts cached
    dialect = database.engine.dialect.name
    key_scope = scope("count", "second", _moves(size), NOW_US + 1)
    with counting(database) as statements:
        outcome = plane(database, key_scope, builder(books, _moves(size)))
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT first_sequences, refused_transfer, refused_account, refusal FROM"), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[3].startswith("INSERT INTO idempotency_keys"), run
    assert outcome is not None and outcome.status == 201
    answer = json.loads(outcome.body)
    # The wallet's funding was its first entry, then "first": this batch's entries follow, in order.
    assert [t["entries"][0]["account_sequence"] for t in answer["transfers"]] == list(range(3, 3 + size))
    assert [t["entries"][1]["account_sequence"] for t in answer["transfers"]] == list(range(2, 2 + size))
    with database.read() as connection:
        assert idempotency.recorded(connection, key_scope) == outcome
        wallet = ledger.get_account(connection, "count", books["wallet"])
    assert wallet.balance.posted_minor == 1_000 - 3 * (size + 1)


# ------------------------------------------------------------------ the rows are the reference path's

CASES: list[Batch] = [_moves(3), TRANSFER_CASES[1:]]  # the transfers' shapes after the first, in one batch


def test_the_rows_and_answers_are_the_reference_paths(database: Database) -> None:
    """The same batches, one tenant through the data plane, another through the reference
    path: the same transfers, entries, keys with their stored answers, and account totals."""
    books = {tenant: open_books(database, tenant) for tenant in ("plane", "reference")}
    for index, transfers in enumerate(CASES):
        written = plane(
            database, scope("plane", f"k{index}", transfers, NOW_US + index), builder(books["plane"], transfers)
        )
        expected, replayed = create(
            database,
            scope("reference", f"k{index}", transfers, NOW_US + index),
            builder(books["reference"], transfers),
            one_call=False,
        )
        assert written is not None and not replayed and expected.status == 201
        assert normalised(books["plane"], written.body) == normalised(books["reference"], expected.body)
    transfers_count = sum(len(transfers) for transfers in CASES)
    entries = sum(len(legs) for transfers in CASES for legs, _ in transfers)
    assert_same_rows(database, [len(ACCOUNTS), transfers_count + 2, entries + 4, len(CASES)])


# ------------------------------------------------------------------ everything else: the reference path's


def falls_back(database: Database, key_scope: idempotency.KeyScope, build: batch_keyed.BuildSpecs) -> None:
    """The data plane leaves the batch to the reference path, having written nothing: no rows,
    no key (on PostgreSQL the call claimed it and took the claim back)."""
    assert_writes_nothing(database, lambda: plane(database, key_scope, build))


def test_a_replayed_key_is_the_reference_paths(database: Database) -> None:
    books = open_books(database, "again")
    key_scope = scope("again", "k", _moves(2))
    first = plane(database, key_scope, builder(books, _moves(2)))
    assert first is not None
    falls_back(database, key_scope, builder(books, _moves(2)))
    assert create(database, key_scope, builder(books, _moves(2))) == (first, True)
    with database.read() as connection:
        assert ledger.get_account(connection, "again", books["wallet"]).balance.posted_minor == 1_000 - 6


def test_a_reused_key_is_refused_by_the_reference_path(database: Database) -> None:
    books = open_books(database, "reuse")
    assert plane(database, scope("reuse", "k", _moves(2)), builder(books, _moves(2))) is not None
    reused = scope("reuse", "k", _moves(3))
    falls_back(database, reused, builder(books, _moves(3)))
    with pytest.raises(IdempotencyKeyReused):
        create(database, reused, builder(books, _moves(3)))


# Refusals of the write (the function's on PostgreSQL, `batch.apply_moves` on SQLite) and of the
# request (the planner's): each at transfers[2], after two that would apply.
REFUSALS: dict[str, tuple[Batch, str]] = {
    "insufficient funds": (
        [*_moves(2), ([("wallet", "debit", 995), ("merchant", "credit", 995)], {})],
        "insufficient_funds",
    ),
    "a balance past 2^53 - 1": (
        [*_moves(2), ([("cash", "debit", 6), ("ceiling", "credit", 6)], {})],
        "balance_limit_exceeded",
    ),
    "unbalanced": ([*_moves(2), ([("wallet", "debit", 2), ("merchant", "credit", 1)], {})], "unbalanced_transfer"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_is_the_reference_paths_recorded_refusal(database: Database, case: str) -> None:
    books = open_books(database, "refused")
    transfers, code = REFUSALS[case]
    build = builder(books, transfers)
    key_scope = scope("refused", "k", transfers)
    falls_back(database, key_scope, build)
    outcome, replayed = create(database, key_scope, build)
    refusal = json.loads(outcome.body)
    assert 400 <= outcome.status < 500 and not replayed
    assert (refusal["error"], refusal["param"]) == (code, "transfers[2].entries"), refusal
    assert create(database, key_scope, build) == (outcome, True)
    with database.read() as connection:
        assert ledger.get_account(connection, "refused", books["wallet"]).balance.posted_minor == 1_000
