"""A ledger transfer on the data plane (ADR 0026, issue 39): what it costs in SQL, counted
(never timed) on each database; that it writes exactly the rows the reference path
(`idempotency.run` around `service.create_transfer`) writes for the same request; that
everything but a success written at once is the reference path's to decide; and that
processes racing on one hot account never overdraw it and make each key's transfer once
(`test_transfer_across_processes.py`).

Counted as tests/integration/payments/test_statement_counts.py counts (every statement the
driver runs, a SQLite group's BEGIN IMMEDIATE included, and every commit), around the write
alone (`keyed.create_in_statements`, `keyed.create_in_one_call`: below the HTTP edge).
`PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.

Before the data plane on SQLite (the reference path, counted the same way, the accounts' facts
cached): BEGIN IMMEDIATE and 6 statements (the key's claim, the transfer, the two accounts'
totals, the entries, the key's answer) and 1 commit. PostgreSQL's one call is ADR 0011's.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.ledger import keyed, schemas
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound, InvalidEntries
from paycore.ledger.service import EntrySpec, TransferSpec
from tests.support.ledger_books import (
    ACCOUNTS,
    CASES,
    NOW_US,
    Leg,
    assert_same_rows,
    assert_writes_nothing,
    normalised,
    open_books,
)
from tests.support.rows import row_counts
from tests.support.statements import counting

# A transfer between two accounts whose facts this process has cached, the write alone.
# PostgreSQL: the one call (autocommit: no BEGIN, no COMMIT of the client's). SQLite: BEGIN
# IMMEDIATE, the two accounts' totals, the key's claim with its answer, the transfer, its
# entries (ADR 0026's fixed list), and the group's commit.
STATEMENTS = {"sqlite": 6, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}


def render(transfer: ledger.Transfer) -> str:
    return dumps(schemas.transfer_json(transfer))


def scope(tenant: str, key: str, body: Any, now_us: int = NOW_US) -> idempotency.KeyScope:
    fingerprint = idempotency.fingerprint("POST", "/v1/transfers", body)
    return idempotency.KeyScope(tenant, key, fingerprint, now_us=now_us, expires_at_us=None)


def builder(books: dict[str, str], legs: list[Leg], **options: Any) -> keyed.BuildSpec:
    entries = tuple(EntrySpec(books[code], direction, amount) for code, direction, amount in legs)
    return lambda _now_us: TransferSpec(entries, **options)


def body_of(legs: list[Leg], options: dict[str, Any]) -> Any:
    return {"legs": legs, **{name: repr(value) for name, value in options.items()}}


def plane(database: Database, key_scope: idempotency.KeyScope, build: keyed.BuildSpec) -> idempotency.Outcome | None:
    """The data plane's write alone: its outcome, or None where it left the request to the
    reference path (having written nothing)."""
    write = keyed.create_in_one_call if database.is_postgres else keyed.create_in_statements
    return write(database, key_scope, build, render)


def reference(
    database: Database, key_scope: idempotency.KeyScope, build: keyed.BuildSpec
) -> tuple[idempotency.Outcome, bool]:
    return keyed.create_transfer(database, key_scope, build, render, render_refusal, one_call=False)


def test_a_transfer_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    books = open_books(database, "count")
    legs = [("wallet", "debit", 300), ("merchant", "credit", 300)]
    build = builder(books, legs)
    assert plane(database, scope("count", "first", body_of(legs, {})), build) is not None  # facts cached
    dialect = database.engine.dialect.name
    with counting(database) as statements:
        outcome = plane(database, scope("count", "second", body_of(legs, {}), NOW_US + 1), build)
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_create_transfer("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[1].startswith("UPDATE ledger_accounts"), run
    assert outcome is not None and outcome.status == 201
    answer = json.loads(outcome.body)
    # The wallet's funding was its first entry, then "first": this is its third; the merchant's second.
    assert [entry["account_sequence"] for entry in answer["entries"]] == [3, 2]
    with database.read() as connection:
        assert idempotency.recorded(connection, scope("count", "second", body_of(legs, {}))) == outcome
        wallet = ledger.get_account(connection, "count", books["wallet"])
    assert wallet.balance.posted_minor == 400


def test_accounts_this_process_has_not_seen_are_read_outside_the_write(database: Database) -> None:
    """SQLite: their facts come from one read before the write, which stays the fixed list."""
    if database.is_postgres:
        pytest.skip("PostgreSQL reads them on the call's own connection, as before the data plane")
    books = open_books(database, "unseen")
    legs = [("eur.wallet", "credit", 5), ("eur.cash", "debit", 5)]  # accounts no transfer touched yet
    with counting(database) as statements:
        outcome = plane(database, scope("unseen", "k", body_of(legs, {})), builder(books, legs))
    assert outcome is not None and outcome.status == 201
    write = statements[statements.index("BEGIN IMMEDIATE") :]
    assert len([sql for sql in write if sql != "COMMIT"]) == STATEMENTS["sqlite"], statements
    assert any(sql.startswith("SELECT") for sql in statements[: statements.index("BEGIN IMMEDIATE")]), statements


# ------------------------------------------------------------------ the rows are the reference path's


def test_the_rows_and_answers_are_the_reference_paths(database: Database) -> None:
    """The same requests, one tenant through the data plane, another through the reference
    path: the same transfers, entries, keys with their stored answers, and account totals."""
    books = {tenant: open_books(database, tenant) for tenant in ("plane", "reference")}
    for index, (legs, options) in enumerate(CASES):
        body = body_of(legs, options)
        written = plane(
            database, scope("plane", f"k{index}", body, NOW_US + index), builder(books["plane"], legs, **options)
        )
        expected, replayed = reference(
            database,
            scope("reference", f"k{index}", body, NOW_US + index),
            builder(books["reference"], legs, **options),
        )
        assert written is not None and not replayed and expected.status == 201
        assert normalised(books["plane"], written.body) == normalised(books["reference"], expected.body)
    entries = sum(len(legs) for legs, _ in CASES)
    assert_same_rows(database, [len(ACCOUNTS), len(CASES) + 2, entries + 4, len(CASES)])


# ------------------------------------------------------------------ everything else: the reference path's


def falls_back(database: Database, key_scope: idempotency.KeyScope, build: keyed.BuildSpec) -> None:
    """The data plane leaves the request to the reference path, having written nothing."""
    assert_writes_nothing(database, lambda: plane(database, key_scope, build))


def test_a_replayed_key_is_the_reference_paths(database: Database) -> None:
    books = open_books(database, "again")
    legs = [("wallet", "debit", 300), ("merchant", "credit", 300)]
    key_scope = scope("again", "k", body_of(legs, {}))
    first = plane(database, key_scope, builder(books, legs))
    assert first is not None
    falls_back(database, key_scope, builder(books, legs))
    assert keyed.create_transfer(database, key_scope, builder(books, legs), render, render_refusal) == (first, True)
    with database.read() as connection:
        assert ledger.get_account(connection, "again", books["wallet"]).balance.posted_minor == 700


def test_a_reused_key_is_refused_by_the_reference_path(database: Database) -> None:
    books = open_books(database, "reuse")
    legs = [("wallet", "debit", 300), ("merchant", "credit", 300)]
    assert plane(database, scope("reuse", "k", body_of(legs, {})), builder(books, legs)) is not None
    other = [("wallet", "debit", 5), ("merchant", "credit", 5)]
    reused = scope("reuse", "k", body_of(other, {}))
    falls_back(database, reused, builder(books, other))
    with pytest.raises(IdempotencyKeyReused):
        keyed.create_transfer(database, reused, builder(books, other), render, render_refusal)


REFUSALS: dict[str, tuple[list[Leg], dict[str, Any], str]] = {
    "insufficient funds": ([("wallet", "debit", 1_001), ("merchant", "credit", 1_001)], {}, "insufficient_funds"),
    "guarded account": (
        [("merchant", "debit", 1), ("fees", "credit", 1)],
        {"guard_available": "merchant"},
        "insufficient_funds",
    ),
    "a balance past 2^53 - 1": ([("cash", "debit", 6), ("ceiling", "credit", 6)], {}, "balance_limit_exceeded"),
    "currency mismatch": (
        [("wallet", "debit", 1), ("eur.cash", "credit", 1)],
        {"currency": "USD"},
        "currency_mismatch",
    ),
    "unbalanced": ([("wallet", "debit", 2), ("merchant", "credit", 1)], {}, "unbalanced_transfer"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_is_the_reference_paths_recorded_refusal(database: Database, case: str) -> None:
    books = open_books(database, "refused")
    legs, options, code = REFUSALS[case]
    if "guard_available" in options:
        options = {**options, "guard_available": (books[options["guard_available"]],)}
    build = builder(books, legs, **options)
    key_scope = scope("refused", "k", body_of(legs, options))
    falls_back(database, key_scope, build)
    outcome, replayed = keyed.create_transfer(database, key_scope, build, render, render_refusal)
    assert 400 <= outcome.status < 500 and json.loads(outcome.body)["error"] == code and not replayed


def test_an_unknown_account_is_the_reference_paths(database: Database) -> None:
    books = open_books(database, "unknown")
    books = {**books, "ghost": "acct_00000000000000000000000000"}
    legs = [("wallet", "debit", 1), ("ghost", "credit", 1)]
    key_scope = scope("unknown", "k", body_of(legs, {}))
    falls_back(database, key_scope, builder(books, legs))
    with pytest.raises(AccountNotFound):  # not recorded: the key stays free
        keyed.create_transfer(database, key_scope, builder(books, legs), render, render_refusal)


def test_a_single_entry_is_the_reference_paths(database: Database) -> None:
    books = open_books(database, "single")
    legs = [("wallet", "debit", 2)]
    key_scope = scope("single", "k", body_of(legs, {}))
    falls_back(database, key_scope, builder(books, legs))
    with pytest.raises(InvalidEntries):
        keyed.create_transfer(database, key_scope, builder(books, legs), render, render_refusal)


def test_facts_cached_from_another_database_move_nothing(database: Database) -> None:
    """An account this process has cached (the facts' cache is the process's, ADR 0007) that
    this database does not hold: the write finds no row, writes nothing, and the reference
    path refuses."""
    books = open_books(database, "stale")
    ghost = SimpleNamespace(
        id="acct_0000000000000000000000ghost",
        code="ghost",
        currency="USD",
        normal_balance="credit",
        no_overdraft=False,
        metadata="{}",
        created_at_us=NOW_US,
        debits_posted_minor=0,
        credits_posted_minor=0,
        debits_pending_minor=0,
        credits_pending_minor=0,
        system=False,
    )
    ledger.remember_accounts("stale", [ghost])
    books = {**books, "ghost": ghost.id}
    legs = [("wallet", "debit", 1), ("ghost", "credit", 1)]
    key_scope = scope("stale", "k", body_of(legs, {}))
    falls_back(database, key_scope, builder(books, legs))
    with pytest.raises(AccountNotFound):  # the reference path's own UPDATE finds no row either
        keyed.create_transfer(database, key_scope, builder(books, legs), render, render_refusal)
    assert row_counts(database)["idempotency_keys"] == 0
