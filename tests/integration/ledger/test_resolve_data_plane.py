"""A hold's post and void and a transfer's reversal on the data plane (ADR 0026): what each costs
in SQL, counted (never timed) on each database; that it writes exactly the rows and answers the
reference path (`idempotency.run` around `service.post_pending`, `void_pending`,
`reverse_transfer`) writes for the same requests; and that everything but a success written at
once (a replay, a reused key, every refusal) is the reference path's, having written nothing.

Counted as tests/integration/ledger/test_transfer_data_plane.py counts, around the data plane
alone (`resolve_keyed.in_one_call`, `in_statements`), the accounts' facts cached.
`PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.http.errors import render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.ledger import resolve_keyed, resolve_repository
from paycore.ledger import service as ledger
from paycore.ledger.errors import TransferNotFound
from paycore.ledger.service import EntrySpec, TransferSpec
from tests.integration.ledger.test_transfer_data_plane import render
from tests.support.ledger_books import NOW_US, Leg, assert_same_rows, assert_writes_nothing, normalised, open_books
from tests.support.statements import counting

# The write alone, a two-entry hold (or transfer) whose accounts' facts are cached. PostgreSQL:
# the transfer's read and the one call (autocommit). SQLite: the read (BEGIN, the SELECT and its
# COMMIT: a WAL read), then BEGIN IMMEDIATE, the key's claim with its answer, the resolution, the
# two accounts, the posted entries (none for a void); a reversal: the two accounts, the key, the
# reversal, its entries.
STATEMENTS = {
    "postgresql": {"post": 2, "void": 2, "reverse": 2},
    "sqlite": {"post": 8, "void": 7, "reverse": 8},
}
COMMITS = {"sqlite": 2, "postgresql": 0}  # SQLite: the read's, the write's
CALLS = {"post": "paycore_transfer_resolve", "void": "paycore_transfer_resolve", "reverse": "paycore_transfer_reverse"}
FAR_US = 4_102_444_800_000_000  # 2100: an expiry not reached


def scope(tenant: str, key: str, path: str, body: Any, now_us: int) -> idempotency.KeyScope:
    fingerprint = idempotency.fingerprint("POST", path, body)
    return idempotency.KeyScope(tenant, key, fingerprint, now_us=now_us, expires_at_us=None)


def transfer(
    database: Database, tenant: str, books: dict[str, str], legs: list[Leg], now_us: int, **options: Any
) -> str:
    """A transfer (a hold with `pending=True`) written by the reference path: its id."""
    entries = tuple(EntrySpec(books[code], direction, amount) for code, direction, amount in legs)
    made = database.transaction(
        lambda connection: ledger.create_transfer(connection, tenant, TransferSpec(entries, **options), now_us=now_us)
    )
    return made.id


class Request:
    """One of the three requests on one transfer: its operation, key scope and path."""

    def __init__(
        self, kind: str, transfer_id: str, key: str, now_us: int, tenant: str, label: str = "", **options: Any
    ) -> None:
        self.kind, self.transfer_id = kind, transfer_id
        path = f"/v1/transfers/{label or transfer_id}/{kind}"  # a label: the same fingerprint on two tenants
        if kind == "post":
            amount = options.get("amount_minor")
            body = None if "amount_minor" not in options else {"amount_minor": amount}
            self.operation: resolve_keyed.Operation[Any] = resolve_keyed.post(transfer_id, amount, render)
        elif kind == "void":
            body = None
            self.operation = resolve_keyed.void(transfer_id, render)
        else:
            metadata = options.get("metadata")
            body = None if "metadata" not in options else {"metadata": metadata}
            self.operation = resolve_keyed.reverse(transfer_id, metadata, render)
        self.scope = scope(tenant, key, path, body, now_us)


def plane(database: Database, request: Request) -> idempotency.Outcome | None:
    """The data plane's write alone: its outcome, or None where it left the request to the
    reference path (having written nothing)."""
    write = resolve_keyed.in_one_call if database.is_postgres else resolve_keyed.in_statements
    return write(database, request.scope, request.operation)


def reference(database: Database, request: Request) -> tuple[idempotency.Outcome, bool]:
    return resolve_keyed.answer(database, request.scope, request.operation, render_refusal, one_call=False)


def answer(database: Database, request: Request) -> tuple[idempotency.Outcome, bool]:
    return resolve_keyed.answer(database, request.scope, request.operation, render_refusal)


HOLD: list[Leg] = [("wallet", "debit", 200), ("merchant", "credit", 200)]
PLAIN: list[Leg] = [("wallet", "debit", 100), ("merchant", "credit", 100)]


@pytest.mark.parametrize("kind", ["post", "void", "reverse"])
def test_each_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database, kind: str) -> None:
    books = open_books(database, "count")
    pending = kind != "reverse"
    first = transfer(database, "count", books, HOLD if pending else PLAIN, NOW_US, pending=pending)
    second = transfer(database, "count", books, HOLD if pending else PLAIN, NOW_US + 1, pending=pending)
    assert plane(database, Request(kind, first, "first", NOW_US + 2, "count")) is not None  # facts cached
    dialect = database.engine.dialect.name
    request = Request(kind, second, "second", NOW_US + 3, "count")
    with counting(database) as statements:
        outcome = plane(database, request)
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (STATEMENTS[dialect][kind], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT t.id, t.kind") and run[1].startswith(f"SELECT {CALLS[kind]}("), run
    else:
        assert run[:3] == ["BEGIN", run[1], "BEGIN IMMEDIATE"] and run[1].startswith("SELECT t.id, t.kind"), run
    assert outcome is not None and outcome.status == (201 if kind == "reverse" else 200)
    with database.read() as connection:
        assert idempotency.recorded(connection, request.scope) == outcome
        wallet = ledger.get_account(connection, "count", books["wallet"])
        assert ledger.verify(connection).problems == []
    spent = {"post": 400, "void": 0, "reverse": 0}[kind]
    assert wallet.balance.posted_minor == 1_000 - spent and wallet.balance.available_minor == 1_000 - spent


# ------------------------------------------------------------------ the rows are the reference path's


def _cases(database: Database, tenant: str, books: dict[str, str]) -> list[Request]:
    """Every shape the data plane writes, on transfers made alike for each tenant: a hold posted
    whole, in part, with a body naming no amount; a hold of several entries posted whole; a hold
    voided; a hold with an expiry not reached, posted; a transfer reversed with and without
    metadata; a hold posted in part, then reversed by its own id (its post reversed)."""
    at = iter(range(NOW_US + 1, NOW_US + 1_000))
    made = {
        "whole": transfer(database, tenant, books, HOLD, next(at), pending=True),
        "part": transfer(database, tenant, books, HOLD, next(at), pending=True),
        "empty": transfer(database, tenant, books, HOLD, next(at), pending=True),
        "several": transfer(
            database,
            tenant,
            books,
            [("wallet", "debit", 10), ("wallet", "debit", 5), ("merchant", "credit", 12), ("fees", "credit", 3)],
            next(at),
            pending=True,
            metadata={"order": "o-1"},
        ),
        "void": transfer(database, tenant, books, HOLD, next(at), pending=True, reference_id="adj_1"),
        "expiring": transfer(database, tenant, books, HOLD, next(at), pending=True, expires_at_us=FAR_US),
        "plain": transfer(database, tenant, books, PLAIN, next(at), metadata={"x": "y"}),
        "plain2": transfer(database, tenant, books, [("eur.cash", "debit", 9), ("eur.wallet", "credit", 9)], next(at)),
        "posted": transfer(database, tenant, books, HOLD, next(at), pending=True),
    }

    def request(kind: str, name: str, key: str, **options: Any) -> Request:
        return Request(kind, made[name], key, next(at), tenant, label=name, **options)

    return [
        request("post", "whole", "k1"),
        request("post", "part", "k2", amount_minor=150),
        request("post", "empty", "k3", amount_minor=None),
        request("post", "several", "k4"),
        request("void", "void", "k5"),
        request("post", "expiring", "k6"),
        request("reverse", "plain", "k7"),
        request("reverse", "plain2", "k8", metadata={"why": "mistake"}),
        request("post", "posted", "k9", amount_minor=50),
        request("reverse", "posted", "k10", metadata=None),
    ]


def test_the_rows_and_answers_are_the_reference_paths(database: Database) -> None:
    """The same requests, one tenant through the data plane, another through the reference path:
    the same transfers, entries, keys with their stored answers, and account totals."""
    books = {tenant: open_books(database, tenant, wallet_minor=5_000) for tenant in ("plane", "reference")}
    planes, references = _cases(database, "plane", books["plane"]), _cases(database, "reference", books["reference"])
    for mine, theirs in zip(planes, references, strict=True):
        written = plane(database, mine)
        expected, replayed = reference(database, theirs)
        assert written is not None and not replayed and expected.status in (200, 201), (theirs.kind, expected)
        assert written.status == expected.status
        assert normalised(books["plane"], written.body) == normalised(books["reference"], expected.body)
    # A reversal reversed: planned from the transfer the path names, as any transfer.
    again = {
        tenant: Request("reverse", _id(database, tenant, "k7"), "k11", NOW_US + 900, tenant, label="again")
        for tenant in books
    }
    written, (expected, _) = plane(database, again["plane"]), reference(database, again["reference"])
    assert written is not None and written.status == expected.status == 201
    assert normalised(books["plane"], written.body) == normalised(books["reference"], expected.body)
    # accounts; 2 funding transfers, 9 made, 11 written; their entries 4, 20 and 22; 11 keys
    assert_same_rows(database, [8, 22, 46, 11])


def _id(database: Database, tenant: str, key: str) -> str:
    """The id of the transfer the answer stored under `key` names."""
    with database.read() as connection:
        body = connection.execute(
            text("SELECT response_body FROM idempotency_keys WHERE tenant_id = :t AND key = :k"),
            {"t": tenant, "k": key},
        ).scalar_one()
    return str(json.loads(body)["id"])


# ------------------------------------------------------------------ everything else: the reference path's


def falls_back(database: Database, request: Request) -> None:
    """The data plane leaves the request to the reference path, having written nothing."""
    assert_writes_nothing(database, lambda: plane(database, request))


def test_a_replayed_key_is_the_reference_paths(database: Database) -> None:
    books = open_books(database, "again")
    hold = transfer(database, "again", books, HOLD, NOW_US, pending=True)
    request = Request("post", hold, "k", NOW_US + 1, "again", amount_minor=120)
    first = plane(database, request)
    assert first is not None
    falls_back(database, request)
    assert answer(database, request) == (first, True)
    with database.read() as connection:
        assert ledger.get_account(connection, "again", books["wallet"]).balance.posted_minor == 880


def test_a_reused_key_is_refused_by_the_reference_path(database: Database) -> None:
    books = open_books(database, "reuse")
    holds = [transfer(database, "reuse", books, HOLD, NOW_US + index, pending=True) for index in range(2)]
    assert plane(database, Request("void", holds[0], "k", NOW_US + 2, "reuse")) is not None
    reused = Request("void", holds[1], "k", NOW_US + 3, "reuse")
    falls_back(database, reused)  # the hold is pending: planned and written, the key found taken
    with pytest.raises(IdempotencyKeyReused):
        answer(database, reused)


def _refusal_cases(database: Database, books: dict[str, str]) -> dict[str, tuple[Request, str]]:
    at = iter(range(NOW_US + 1, NOW_US + 1_000))

    def hold(**options: Any) -> str:
        return transfer(database, "refused", books, HOLD, next(at), pending=True, **options)

    def request(kind: str, transfer_id: str, **options: Any) -> Request:
        return Request(kind, transfer_id, f"k-{next(at)}", next(at), "refused", **options)

    posted, voided, reversed_ = hold(), hold(), transfer(database, "refused", books, PLAIN, next(at))
    for kind, transfer_id in (("post", posted), ("void", voided), ("reverse", reversed_)):
        assert reference(database, request(kind, transfer_id))[0].status in (200, 201)
    several = transfer(
        database,
        "refused",
        books,
        [("wallet", "debit", 10), ("merchant", "credit", 7), ("fees", "credit", 3)],
        next(at),
        pending=True,
    )
    owned = hold(owner_id="pay_owned")
    created_us = next(at)
    expired = transfer(
        database, "refused", books, HOLD, created_us, pending=True, expires_at_us=created_us + 1
    )  # every request below is later
    pending, above = hold(), hold()
    # The wallet's funding reversed once the wallet has spent it: an overdraft of a no_overdraft account.
    funding = transfer(database, "refused", books, [("cash", "debit", 50), ("wallet", "credit", 50)], next(at))
    with database.read() as connection:
        available = ledger.get_account(connection, "refused", books["wallet"]).balance.available_minor
    spent: list[Leg] = [("wallet", "debit", available), ("merchant", "credit", available)]
    transfer(database, "refused", books, spent, next(at))
    # The ceiling 8 below 2^53 - 1 (it is funded to 5 below), then back to it: reversing the
    # first would take it past the balance limit.
    lowered = transfer(database, "refused", books, [("ceiling", "debit", 3), ("source", "credit", 3)], next(at))
    transfer(database, "refused", books, [("cash", "debit", 8), ("ceiling", "credit", 8)], next(at))
    return {
        "posted already": (request("post", posted), "transfer_not_pending"),
        "voided already": (request("void", voided), "transfer_not_pending"),
        "void of a posted hold": (request("void", posted), "transfer_not_pending"),
        "a partial post above the hold": (request("post", above, amount_minor=201), "post_amount_exceeds_pending"),
        "a partial post of several entries": (request("post", several, amount_minor=5), "partial_post_unsupported"),
        "a flow's hold posted": (request("post", owned), "managed_transfer"),
        "a flow's hold voided": (request("void", owned), "managed_transfer"),
        "a flow's hold reversed": (request("reverse", owned), "managed_transfer"),
        "an expired hold posted": (request("post", expired), "transfer_expired"),
        "a pending hold reversed": (request("reverse", pending), "transfer_not_reversible"),
        "a voided hold reversed": (request("reverse", voided), "transfer_not_reversible"),
        "reversed already": (request("reverse", reversed_), "transfer_not_reversible"),
        "a post of a transfer": (request("post", reversed_), "transfer_not_pending"),
        "an overdraft": (request("reverse", funding), "insufficient_funds"),
        "a balance past 2^53 - 1": (request("reverse", lowered), "balance_limit_exceeded"),
    }


def test_every_refusal_is_the_reference_paths_recorded_refusal(database: Database) -> None:
    """Each refusal: the data plane writes nothing, and the reference path answers as it always
    has (the code, and the message, which the reference path alone makes)."""
    books = open_books(database, "refused", wallet_minor=5_000)
    cases = _refusal_cases(database, books)
    for name, (request, code) in cases.items():
        falls_back(database, request)
        outcome, replayed = answer(database, request)
        assert 400 <= outcome.status < 500 and json.loads(outcome.body)["error"] == code, (name, outcome)
        assert not replayed, name
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_an_unknown_transfer_is_the_reference_paths(database: Database) -> None:
    open_books(database, "unknown")
    request = Request("post", "txn_00000000000000000000000000", "k", NOW_US, "unknown")
    falls_back(database, request)
    with pytest.raises(TransferNotFound):
        answer(database, request)


def test_a_hold_resolved_between_the_read_and_the_write_is_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read is outside the write: a hold voided in between is found by the write's own
    insert (the unique resolution), which writes nothing; the reference path refuses."""
    books = open_books(database, "between")
    hold = transfer(database, "between", books, HOLD, NOW_US, pending=True)
    real_read = resolve_repository.read

    def read_then_void(connection: Any, tenant_id: str, transfer_id: str) -> Any:
        found = real_read(connection, tenant_id, transfer_id)
        assert reference(database, Request("void", hold, "other", NOW_US + 1, "between"))[0].status == 200
        return found

    monkeypatch.setattr(resolve_repository, "read", read_then_void)
    request = Request("post", hold, "k", NOW_US + 2, "between")
    assert plane(database, request) is None
    monkeypatch.undo()
    outcome, _ = answer(database, request)
    assert json.loads(outcome.body)["error"] == "transfer_not_pending"
    with database.read() as connection:
        assert ledger.get_account(connection, "between", books["wallet"]).balance.posted_minor == 1_000
        assert ledger.verify(connection).problems == []


def test_a_schema_without_the_functions_is_the_reference_paths(database: Database) -> None:
    """A PostgreSQL database one revision behind (0054): each call fails with 42883 having
    written nothing, and the reference path posts and reverses as before. The functions are put
    back."""
    if not database.is_postgres:
        pytest.skip("SQLite's lists need no new schema")
    [path] = (MIGRATIONS_PATH / "versions").glob("0055_*.py")
    spec = importlib.util.spec_from_file_location("transfer_resolve_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    books = open_books(database, "behind")
    hold = transfer(database, "behind", books, HOLD, NOW_US, pending=True)
    plain = transfer(database, "behind", books, PLAIN, NOW_US + 1)
    requests = [Request("post", hold, "p", NOW_US + 2, "behind"), Request("reverse", plain, "r", NOW_US + 3, "behind")]
    with database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._REVERSE}"))
        connection.execute(text(f"DROP FUNCTION {migration._RESOLVE}"))
    try:
        for request in requests:
            falls_back(database, request)
            outcome, replayed = answer(database, request)
            assert outcome.status in (200, 201) and not replayed, outcome
    finally:
        with database.autocommit() as connection:
            connection.execute(text(migration._CREATE_RESOLVE))
            connection.execute(text(migration._CREATE_REVERSE))
    with database.read() as connection:
        wallet = ledger.get_account(connection, "behind", books["wallet"])
    assert wallet.balance.posted_minor == 1_000 - 200  # the hold posted; the 100 moved, then reversed
