"""A keyed transfer (what POST /v1/transfers runs): the one-call path on PostgreSQL (migration
0009, ADR 0011) against the reference path, request by request.

Every case runs the same requests twice in one database, on two tenants with the same
accounts: once through the reference path (`one_call=False`: Python, one transaction) and
once through `keyed.create_transfer` as the HTTP route calls it. Their answers, accounts and
entries must be equal, ids and clocks aside. On PostgreSQL a success must also come from the
one call itself, and a refusal must leave the call having written nothing.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database, DatabaseBusy
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused, IdempotencyRequestInProgress
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX, BALANCE_MINOR_MAX
from paycore.ledger import keyed, schemas
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec

REFERENCE, ONE_CALL = "t_reference", "t_one_call"
# code: (currency, normal balance, no_overdraft, funding)
ACCOUNTS = {
    "cash": ("USD", "debit", False, 0),
    "wallet": ("USD", "credit", True, 1_000),
    "merchant": ("USD", "credit", False, 0),
    "fees": ("USD", "credit", False, 0),
    "eur.cash": ("EUR", "debit", False, 0),
    "eur.wallet": ("EUR", "credit", True, 500),
    "loose": ("USD", "credit", False, 0),
    "prepaid": ("USD", "debit", True, 800),  # debit-normal: spent by crediting it
    "equity": ("USD", "credit", False, 0),  # where the prepaid account's funding comes from
    # Its credits are set by hand to 5 below the 64-bit edge, its debits to 1,000 below that, so
    # its balance (1,000) is far from the 2^53 - 1 limit while a total nears the 64-bit range.
    "full": ("USD", "credit", False, 0),
    "ceiling": ("USD", "credit", False, 0),  # its balance is set by hand to 5 below 2^53 - 1
    "floor": ("USD", "credit", False, 0),  # its balance is set by hand to 5 above -(2^53 - 1)
}
Leg = tuple[str, str, int]  # (account code, direction, amount_minor)


def _render(transfer: ledger.Transfer) -> str:
    return dumps(schemas.transfer_json(transfer))


def _open_books(database: Database, tenant: str) -> dict[str, str]:
    def work(connection: Any) -> dict[str, str]:
        ids = {}
        for code, (currency, normal, no_overdraft, _) in ACCOUNTS.items():
            account = ledger.create_account(
                connection,
                tenant,
                code=code,
                currency=currency,
                normal_balance=normal,
                no_overdraft=no_overdraft,
                metadata={},
                now_us=now_us(),
            )
            ids[code] = account.id
        for code, (currency, normal, _, funding) in ACCOUNTS.items():
            if funding and normal == "debit":
                legs = (EntrySpec(ids[code], "debit", funding), EntrySpec(ids["equity"], "credit", funding))
                ledger.create_transfer(connection, tenant, TransferSpec(legs), now_us=now_us())
            elif funding:
                source = ids["cash" if currency == "USD" else "eur.cash"]
                legs = (EntrySpec(source, "debit", funding), EntrySpec(ids[code], "credit", funding))
                ledger.create_transfer(connection, tenant, TransferSpec(legs), now_us=now_us())
        connection.execute(
            text(
                "UPDATE ledger_accounts SET credits_posted_minor = :total, debits_posted_minor = :total - 1000"
                " WHERE tenant_id = :t AND id = :id"
            ),
            {"total": BALANCE_MINOR_MAX - 5, "t": tenant, "id": ids["full"]},
        )
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE tenant_id = :t AND id = :id"),
            {"total": AMOUNT_MINOR_MAX - 5, "t": tenant, "id": ids["ceiling"]},
        )
        connection.execute(
            text("UPDATE ledger_accounts SET debits_posted_minor = :total WHERE tenant_id = :t AND id = :id"),
            {"total": AMOUNT_MINOR_MAX - 5, "t": tenant, "id": ids["floor"]},
        )
        return ids

    return database.transaction(work)


class Books:
    """The same accounts on both tenants, and a way to send one request to each."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.ids = {tenant: _open_books(database, tenant) for tenant in (REFERENCE, ONE_CALL)}
        self.answered_by_one_call = False

    def scope(self, tenant: str, key: str, body: Any) -> idempotency.KeyScope:
        return idempotency.KeyScope(
            tenant_id=tenant,
            key=key,
            request_fingerprint=idempotency.fingerprint("POST", "/v1/transfers", body),
            now_us=now_us(),
            expires_at_us=None,
        )

    def builder(self, tenant: str, legs: list[Leg], **options: Any) -> Callable[[int], TransferSpec]:
        ids = self.ids[tenant]
        guard = tuple(ids[code] for code in options.pop("guard", ()))
        entries = tuple(EntrySpec(ids[code], direction, amount) for code, direction, amount in legs)
        return lambda _now_us: TransferSpec(entries, guard_available=guard, **options)

    def send(self, tenant: str, key: str, legs: list[Leg], **options: Any) -> tuple[idempotency.Outcome, bool]:
        return keyed.create_transfer(
            self.database,
            self.scope(tenant, key, self.body(legs, options)),
            self.builder(tenant, legs, **options),
            _render,
            render_refusal,
            one_call=tenant == ONE_CALL,
        )

    def both(self, key: str, legs: list[Leg], **options: Any) -> tuple[Any, Any]:
        """The request on both tenants; each side's (status, normalised body, replayed). On
        PostgreSQL the one-call side first tries the call alone: `answered_by_one_call` says
        whether it answered, and when it did not, it must have written nothing."""
        outcome, replayed = self.send(REFERENCE, key, legs, **dict(options))
        reference = (outcome.status, self.normalised(REFERENCE, outcome.body), replayed)
        self.answered_by_one_call = False
        if self.database.is_postgres:
            before = self.state(ONE_CALL)
            body = self.body(legs, options)
            build = self.builder(ONE_CALL, legs, **dict(options))
            direct = keyed.create_in_one_call(self.database, self.scope(ONE_CALL, key, body), build, _render)
            if direct is not None:
                self.answered_by_one_call = True
                return reference, (direct.status, self.normalised(ONE_CALL, direct.body), False)
            assert self.state(ONE_CALL) == before
        outcome, replayed = self.send(ONE_CALL, key, legs, **dict(options))
        return reference, (outcome.status, self.normalised(ONE_CALL, outcome.body), replayed)

    @staticmethod
    def body(legs: list[Leg], options: dict[str, Any]) -> Any:
        return {"legs": legs, **{name: repr(value) for name, value in options.items()}}

    def normalised(self, tenant: str, body: str) -> Any:
        """The body with account ids as codes and generated ids and times as placeholders."""
        for code, account_id in self.ids[tenant].items():
            body = body.replace(account_id, f"account:{code}")
        body = re.sub(r'"(txn|ent)_[0-9A-Za-z]+"', r'"\1_*"', body)
        body = re.sub(r'"\d{4}-\d\d-\d\dT[^"]+"', '"<time>"', body)
        return json.loads(body)

    def state(self, tenant: str) -> Any:
        """Every account's totals and count, and every entry, by account code and sequence."""
        codes = {account_id: code for code, account_id in self.ids[tenant].items()}
        with self.database.read() as connection:
            accounts = connection.execute(
                text(
                    "SELECT id, debits_posted_minor, credits_posted_minor, debits_pending_minor,"
                    " credits_pending_minor, entries_count FROM ledger_accounts WHERE tenant_id = :t"
                ),
                {"t": tenant},
            ).all()
            entries = connection.execute(
                text(
                    "SELECT e.account_id, e.account_sequence, e.direction, e.amount_minor, e.currency, t.kind,"
                    " t.idempotency_key FROM ledger_entries e JOIN ledger_transfers t"
                    " ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id WHERE e.tenant_id = :t"
                ),
                {"t": tenant},
            ).all()
            keys = connection.execute(
                text("SELECT key, response_status FROM idempotency_keys WHERE tenant_id = :t ORDER BY key"),
                {"t": tenant},
            ).all()
        return (
            sorted((codes[row[0]], *row[1:]) for row in accounts),
            sorted((codes[row[0]], *row[1:]) for row in entries),
            [tuple(row) for row in keys],
        )

    def assert_same_books(self) -> None:
        assert self.state(REFERENCE) == self.state(ONE_CALL)


@pytest.fixture
def books(database: Database) -> Books:
    return Books(database)


CASES: dict[str, tuple[list[Leg], dict[str, Any]]] = {
    "two entries": ([("wallet", "debit", 300), ("merchant", "credit", 300)], {}),
    "one account twice": (
        [("wallet", "debit", 10), ("wallet", "debit", 5), ("merchant", "credit", 12), ("fees", "credit", 3)],
        {},
    ),
    "pending with expiry": (
        [("wallet", "debit", 200), ("merchant", "credit", 200)],
        {"pending": True, "expires_at_us": 4_102_444_800_000_000, "metadata": {"order": "o-1"}},
    ),
    "two currencies": (
        [("wallet", "debit", 7), ("merchant", "credit", 7), ("eur.wallet", "debit", 9), ("eur.cash", "credit", 9)],
        {"reference_type": "adjustment", "reference_id": "adj_1"},
    ),
    "up to the 64-bit edge": ([("cash", "debit", 5), ("full", "credit", 5)], {}),
    "a balance up to 2^53 - 1": ([("cash", "debit", 5), ("ceiling", "credit", 5)], {}),
    "a hold up to 2^53 - 1 (its post will fit)": (
        [("cash", "debit", 5), ("ceiling", "credit", 5)],
        {"pending": True},
    ),
    "money leaving an account at the limit": ([("ceiling", "debit", 7), ("cash", "credit", 7)], {}),
    "a metadata value that looks like a sequence": (
        [("wallet", "debit", 1), ("merchant", "credit", 1)],
        {"metadata": {"account_sequence": "0", "x": '","account_sequence":0,"'}},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_success_is_answered_and_written_alike_and_replayed_alike(books: Books, case: str) -> None:
    legs, options = CASES[case]
    reference, one_call = books.both("k1", legs, **options)
    assert reference[0] == 201 and reference[2] is False
    assert one_call == reference
    assert books.answered_by_one_call == books.database.is_postgres
    books.assert_same_books()
    again = books.both("k1", legs, **options)
    assert again == ((201, reference[1], True), (201, reference[1], True))
    assert not books.answered_by_one_call
    books.assert_same_books()


REFUSALS: dict[str, tuple[list[Leg], dict[str, Any], str]] = {
    "insufficient funds": ([("wallet", "debit", 1_001), ("merchant", "credit", 1_001)], {}, "insufficient_funds"),
    "guarded account": (
        [("loose", "debit", 1), ("merchant", "credit", 1)],
        {"guard": ("loose",)},
        "insufficient_funds",
    ),
    "balance overflow": ([("cash", "debit", 6), ("full", "credit", 6)], {}, "balance_overflow"),
    "a posted balance past 2^53 - 1": (
        [("cash", "debit", 6), ("ceiling", "credit", 6)],
        {},
        "balance_limit_exceeded",
    ),
    "a debit-normal balance past 2^53 - 1": (
        [("cash", "debit", AMOUNT_MINOR_MAX), ("merchant", "credit", AMOUNT_MINOR_MAX)],
        {},
        "balance_limit_exceeded",
    ),
    "a hold whose post would pass 2^53 - 1": (
        [("cash", "debit", 6), ("ceiling", "credit", 6)],
        {"pending": True},
        "balance_limit_exceeded",
    ),
    "an available balance past -(2^53 - 1) by a hold": (
        [("floor", "debit", 6), ("merchant", "credit", 6)],
        {"pending": True},
        "balance_limit_exceeded",
    ),
    "currency mismatch": (
        [("wallet", "debit", 1), ("eur.cash", "credit", 1)],
        {"currency": "USD"},
        "currency_mismatch",
    ),
    "unbalanced": ([("wallet", "debit", 2), ("merchant", "credit", 1)], {}, "unbalanced_transfer"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_is_recorded_and_replayed_alike(books: Books, case: str) -> None:
    legs, options, code = REFUSALS[case]
    reference, one_call = books.both("k1", legs, **options)
    status = reference[0]
    assert 400 <= status < 500 and reference[1]["error"] == code
    assert one_call == reference
    assert not books.answered_by_one_call
    books.assert_same_books()
    assert books.both("k1", legs, **options) == ((status, reference[1], True), (status, reference[1], True))


def test_a_key_used_for_another_request_is_refused_alike(books: Books) -> None:
    books.both("k1", [("wallet", "debit", 1), ("merchant", "credit", 1)])
    for tenant in (REFERENCE, ONE_CALL):
        with pytest.raises(IdempotencyKeyReused):
            books.send(tenant, "k1", [("wallet", "debit", 2), ("merchant", "credit", 2)])
    books.assert_same_books()


def test_an_account_spent_to_zero_then_refused_alike(books: Books) -> None:
    for number in range(3):
        reference, one_call = books.both(f"spend-{number}", [("wallet", "debit", 300), ("merchant", "credit", 300)])
        assert reference[0] == 201 and one_call == reference
        assert books.answered_by_one_call == books.database.is_postgres
    reference, one_call = books.both("spend-last", [("wallet", "debit", 101), ("merchant", "credit", 101)])
    assert reference[0] == 422 and one_call == reference and not books.answered_by_one_call
    reference, one_call = books.both("spend-rest", [("wallet", "debit", 100), ("merchant", "credit", 100)])
    assert reference[0] == 201 and one_call == reference
    assert books.answered_by_one_call == books.database.is_postgres
    books.assert_same_books()


@pytest.mark.parametrize(
    ("spent", "receiver", "direction"), [("wallet", "merchant", "debit"), ("prepaid", "merchant", "credit")]
)
def test_an_open_hold_counts_against_available_alike(books: Books, spent: str, receiver: str, direction: str) -> None:
    """Both normal balances: a hold on the way out is not spendable (wallet: 1,000 funded,
    credit-normal; prepaid: 800 funded, debit-normal)."""
    other = "credit" if direction == "debit" else "debit"
    funded = ACCOUNTS[spent][3]
    hold = funded - 300
    reference, one_call = books.both("hold", [(spent, direction, hold), (receiver, other, hold)], pending=True)
    assert reference[0] == 201 and one_call == reference
    reference, one_call = books.both("over", [(spent, direction, 301), (receiver, other, 301)])
    assert reference[0] == 422 and one_call == reference and not books.answered_by_one_call
    reference, one_call = books.both("rest", [(spent, direction, 300), (receiver, other, 300)])
    assert reference[0] == 201 and one_call == reference
    assert books.answered_by_one_call == books.database.is_postgres
    books.assert_same_books()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_on_postgres_a_success_is_the_one_call_and_a_refusal_writes_nothing(books: Books) -> None:
    legs = [("wallet", "debit", 300), ("merchant", "credit", 300)]
    body = {"legs": legs}
    scope = books.scope(ONE_CALL, "direct", body)
    outcome = keyed.create_in_one_call(books.database, scope, books.builder(ONE_CALL, legs), _render)
    assert outcome is not None and outcome.status == 201
    sequences = [entry["account_sequence"] for entry in json.loads(outcome.body)["entries"]]
    assert sequences == [2, 1]  # the wallet's funding was its first entry; the merchant had none
    with books.database.read() as connection:
        assert idempotency.recorded(connection, scope) == outcome  # the stored body is the answer
    before = books.state(ONE_CALL)
    # The key exists: nothing written, the reference path replays.
    assert keyed.create_in_one_call(books.database, scope, books.builder(ONE_CALL, legs), _render) is None
    for key, (refused_legs, options, _) in REFUSALS.items():
        refused = books.scope(ONE_CALL, key, {"legs": refused_legs})
        build = books.builder(ONE_CALL, refused_legs, **dict(options))
        assert keyed.create_in_one_call(books.database, refused, build, _render) is None, key
    assert books.state(ONE_CALL) == before


WAIT_MS = 1000


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("held", ["the key", "the account"])
def test_on_postgres_a_lock_wait_past_its_bound_is_answered_after_one_wait(database_url: str, held: str) -> None:
    """Behind another transaction's uncommitted key, a duplicate is "still in progress"; behind
    an account's row lock, a transfer is "busy": each after one wait of `idempotency_wait_ms`,
    not one in the call and a second one in the reference path."""
    database = Database(Settings(database_url=database_url, idempotency_wait_ms=WAIT_MS))
    try:
        books = Books(database)
        legs = [("wallet", "debit", 1), ("merchant", "credit", 1)]
        with database.engine.connect() as blocker, blocker.begin():
            if held == "the key":
                blocker.execute(
                    text(
                        "INSERT INTO idempotency_keys (tenant_id, key, fingerprint, created_at_us)"
                        " VALUES (:t, 'held', 'fp', 0)"
                    ),
                    {"t": ONE_CALL},
                )
                expected: type[Exception] = IdempotencyRequestInProgress
            else:
                blocker.execute(
                    text("SELECT 1 FROM ledger_accounts WHERE tenant_id = :t AND id = :id FOR UPDATE"),
                    {"t": ONE_CALL, "id": books.ids[ONE_CALL]["wallet"]},
                )
                expected = DatabaseBusy
            started = time.monotonic()
            with pytest.raises(expected):
                books.send(ONE_CALL, "held", legs)
            waited_s = time.monotonic() - started
        assert WAIT_MS / 1000 <= waited_s < 1.8 * WAIT_MS / 1000, waited_s
        assert books.both("after", legs)[1][0] == 201  # nothing was left behind
    finally:
        database.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("tenant", [REFERENCE, ONE_CALL], ids=["reference", "one_call"])
def test_on_postgres_a_duplicate_waits_once_while_its_key_passes_from_holder_to_holder(
    database_url: str, tenant: str
) -> None:
    """ADR 0004, "One wait": the key's holder rolls back while two duplicates wait; one of them
    takes the key (and then waits on a held account), the other must still give up one bound
    after it began to wait. Waiting on the key's row alone, it waited again on the new holder,
    with a fresh bound: it gave up a whole bound later (or, let in after the new holder rolled
    back in turn, later still)."""
    from paycore.idempotency import repository as keys

    database = Database(Settings(database_url=database_url, idempotency_wait_ms=WAIT_MS))
    try:
        books = Books(database)
        legs = [("wallet", "debit", 1), ("merchant", "credit", 1)]
        scope = books.scope(tenant, "passed-on", books.body(legs, {}))
        outcomes: dict[str, tuple[str, float]] = {}

        def duplicate(name: str) -> None:
            started = time.monotonic()
            try:
                books.send(tenant, "passed-on", legs)
                outcomes[name] = ("answered", time.monotonic() - started)
            except (IdempotencyRequestInProgress, DatabaseBusy) as error:
                outcomes[name] = (type(error).__name__, time.monotonic() - started)

        with database.engine.connect() as account_holder, account_holder.begin():
            account_holder.execute(
                text("SELECT 1 FROM ledger_accounts WHERE tenant_id = :t AND id = :id FOR UPDATE"),
                {"t": tenant, "id": books.ids[tenant]["wallet"]},
            )
            with database.engine.connect() as key_holder:
                key_holder.begin()
                assert keys.claim(key_holder, scope.row(None))
                threads = [threading.Thread(target=duplicate, args=(name,)) for name in ("first", "second")]
                for thread in threads:
                    thread.start()
                time.sleep(0.6 * WAIT_MS / 1000)  # both wait on the key by now
                key_holder.rollback()
                for thread in threads:
                    thread.join(10)
        kinds = sorted(kind for kind, _ in outcomes.values())
        assert kinds == ["DatabaseBusy", "IdempotencyRequestInProgress"], outcomes  # one took the key
        waited_s = next(elapsed for kind, elapsed in outcomes.values() if kind == "IdempotencyRequestInProgress")
        assert WAIT_MS / 1000 <= waited_s < 1.4 * WAIT_MS / 1000, outcomes
        assert books.both("after-passed-on", legs)[1][0] == 201  # nothing was left behind
    finally:
        database.dispose()
