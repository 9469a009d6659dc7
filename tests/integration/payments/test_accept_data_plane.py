"""A payment's accept on the data plane (ADR 0026 step 3, issue 39): what it costs in SQL,
counted (never timed) on each database; that it writes exactly the rows the reference path
(`service._start`) writes for the same request; that everything but a success written at once
is the reference path's to decide; and that processes racing one key make one payment.

Counted as tests/integration/payments/test_statement_counts.py counts (every statement the
driver runs, a SQLite group's BEGIN IMMEDIATE included, and every commit), around accept alone
(`accept.accept`, below the HTTP edge). `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.

Before the data plane (the reference path, main at 6299658, counted the same way; the
statement-count test's first group): BEGIN IMMEDIATE and 9 statements (the claim, the
destination's read, the clearing account's read, the transfer, two totals, the entries, the
payment, the event; 10 with the clearing account's creation on the tenant's first payment) and
1 commit on SQLite; the same without BEGIN and 1 commit on PostgreSQL, each through a
transaction of the client's.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from paycore.audit.rows import EventContext
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.http.errors import render_refusal
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.idempotency.service import KeyScope, Outcome, RefusalToRecord
from paycore.kit import actors
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound
from paycore.payments import accept, accept_plan, accept_repository, service
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment, Payment
from tests.support.rows import named_rows, row_counts
from tests.support.statements import counting

NOW_US = 1_700_000_000_000_000
TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=1_000, first_retry_ms=1)
# A payment of a tenant whose clearing account this process has written to, accept alone.
# PostgreSQL: the one call (autocommit: no BEGIN, no COMMIT of the client's). SQLite: BEGIN
# IMMEDIATE, the key's claim, the two accounts' totals, the transfer, its entries, the
# payment, its event (ADR 0026's fixed list), and the group's commit.
STATEMENTS = {"sqlite": 8, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}
# The tenant's first payment on SQLite adds the clearing account's read and creation.
FIRST_STATEMENTS = {"sqlite": 10, "postgresql": 1}


def _migration(pattern: str) -> Any:
    [path] = (MIGRATIONS_PATH / "versions").glob(pattern)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ACCEPT_0036 = _migration("*_payments_authorize.py")


def scope(tenant_id: str, key: str, *, fingerprint: str = "f" * 64, now_us: int = NOW_US) -> KeyScope:
    return KeyScope(tenant_id, key, fingerprint, now_us=now_us, expires_at_us=None)


def new(
    destination_id: str, amount_minor: int = 1_000, currency: str = "USD", capture: str = "automatic"
) -> NewPayment:
    return NewPayment(
        amount_minor, currency, "card", "tok_ok", destination_id, "two mugs", {"order": "7"}, actors.LOCAL, capture
    )


def account(database: Database, tenant_id: str, currency: str = "USD", code: str = "merchant.main") -> str:
    def create(connection: Any) -> str:
        created = ledger.create_account(
            connection,
            tenant_id,
            code=code,
            currency=currency,
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=NOW_US,
        )
        return created.id

    return database.transaction(create)


class Reference:
    """The reference path, counted: how often the data plane handed a request to it."""

    def __init__(self, database: Database, key_scope: KeyScope, payment: NewPayment) -> None:
        self.database, self.scope, self.payment, self.calls = database, key_scope, payment, 0

    def __call__(self) -> Payment | Outcome | None:
        self.calls += 1
        return self.database.transaction(
            lambda connection: service._start(connection, self.scope, self.payment, TIMINGS, render_refusal)
        )


def accepted(database: Database, key_scope: KeyScope, payment: NewPayment) -> tuple[Payment | Outcome | None, int]:
    """accept's answer, and how often it ran the reference path."""
    reference = Reference(database, key_scope, payment)
    answer = accept.accept(
        database, key_scope, payment, processing_stale_ms=TIMINGS.processing_stale_ms, reference=reference
    )
    return answer, reference.calls


def never() -> None:
    raise AssertionError("the data plane was expected to write this payment itself")


def plane(database: Database, key_scope: KeyScope, payment: NewPayment) -> Payment:
    answer = accept.accept(
        database, key_scope, payment, processing_stale_ms=TIMINGS.processing_stale_ms, reference=never
    )
    assert isinstance(answer, Payment)
    return answer


def test_accept_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    destination = account(database, "count")
    dialect = database.engine.dialect.name
    with counting(database) as first:
        plane(database, scope("count", "first"), new(destination))  # this process learns the clearing account
    assert len([sql for sql in first if sql != "COMMIT"]) == FIRST_STATEMENTS[dialect], first
    with counting(database) as statements:
        payment = plane(database, scope("count", "second", now_us=NOW_US + 1), new(destination, 700))
    commits = statements.count("COMMIT")
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), commits) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_payments_accept("), run
    assert (payment.status, payment.amount_minor, payment.next_attempt_at_us) == (
        "processing",
        700,
        NOW_US + 1 + 60_000 * 1_000,
    )
    with database.read() as connection:
        held = ledger.get_account(connection, "count", destination)
        clearing = ledger.find_account_by_code(connection, "count", accept_plan.clearing_template("USD").code)
    assert (held.balance.posted_minor, held.balance.pending_minor) == (0, 1_700)  # the holds, both
    assert clearing is not None and clearing.balance.pending_minor == 1_700


def rows_of(database: Database, tenant_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row accept writes for the tenant, in an order both paths share, with its ids
    (and the tenant's) replaced by their order of first appearance."""
    queries = {
        "payments": "SELECT * FROM payments WHERE tenant_id = :t ORDER BY created_at_us",
        "ledger_transfers": "SELECT * FROM ledger_transfers WHERE tenant_id = :t ORDER BY created_at_us",
        "ledger_accounts": "SELECT * FROM ledger_accounts WHERE tenant_id = :t ORDER BY code",
        "ledger_entries": "SELECT * FROM ledger_entries WHERE tenant_id = :t ORDER BY created_at_us, direction",
        "events": "SELECT * FROM events WHERE tenant_id = :t ORDER BY created_at_us, kind",
        "idempotency_keys": 'SELECT * FROM idempotency_keys WHERE tenant_id = :t ORDER BY "key"',
    }
    return named_rows(database, tenant_id, queries)


@pytest.mark.parametrize("capture", ["automatic", "manual"])
def test_the_rows_are_the_reference_paths(database: Database, capture: str) -> None:
    """The same requests, one tenant through the data plane, another through the reference
    path: the same payments, transfers, entries, events, keys and account totals; for an
    authorization (`capture: "manual"`, ADR 0029) too."""
    destinations = {tenant: account(database, tenant) for tenant in ("plane", "reference")}
    for index, amount_minor in enumerate((1_000, 250, 9_007_199_254_740_991 - 1_250)):
        key_scope = scope("plane", f"k{index}", now_us=NOW_US + index)
        plane(database, key_scope, new(destinations["plane"], amount_minor, capture=capture))
        reference_scope = replace(key_scope, tenant_id="reference")
        answer = Reference(database, reference_scope, new(destinations["reference"], amount_minor, capture=capture))()
        assert isinstance(answer, Payment)
    written, expected = rows_of(database, "plane"), rows_of(database, "reference")
    assert [len(rows) for rows in written.values()] == [3, 3, 2, 6, 3, 3]
    assert {row["capture_method"] for row in written["payments"]} == {capture}
    for table in expected:
        for mine, theirs in zip(written[table], expected[table], strict=True):
            assert mine == theirs, (table, {k: (v, theirs[k]) for k, v in mine.items() if theirs[k] != v})
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_a_key_that_exists_is_the_reference_paths(database: Database) -> None:
    """Its first request still without an answer: the reference path finds the key open
    (None: the caller waits for the answer); with one: it replays it. One payment."""
    destination = account(database, "again")
    key_scope = scope("again", "k")
    first = plane(database, key_scope, new(destination))
    assert accepted(database, key_scope, new(destination)) == (None, 1)
    answered = text("UPDATE idempotency_keys SET response_status = 202, response_body = '{}' WHERE tenant_id = 'again'")
    database.transaction(lambda connection: connection.execute(answered))
    assert accepted(database, key_scope, new(destination)) == (Outcome(202, "{}"), 1)
    with database.read() as connection:
        assert service.MACHINE.load(connection, "again", first.id).status == "processing"
    assert row_counts(database)["payments"] == 1


def test_a_reused_key_is_refused_by_the_reference_path(database: Database) -> None:
    destination = account(database, "reuse")
    plane(database, scope("reuse", "k", fingerprint="a" * 64), new(destination))
    with pytest.raises(IdempotencyKeyReused):
        accepted(database, scope("reuse", "k", fingerprint="b" * 64), new(destination, 5))
    assert row_counts(database)["payments"] == 1


def refused(database: Database, key_scope: KeyScope, payment: NewPayment, error: type[Exception]) -> Exception:
    """The reference path's refusal, after a data-plane write that wrote nothing."""
    before = row_counts(database)
    reference = Reference(database, key_scope, payment)
    with pytest.raises(error) as raised:
        accept.accept(
            database, key_scope, payment, processing_stale_ms=TIMINGS.processing_stale_ms, reference=reference
        )
    assert reference.calls == 1
    assert row_counts(database) == before  # the reference path rolled its own back too
    return raised.value


def test_a_missing_destination_is_the_reference_paths_refusal(database: Database) -> None:
    account(database, "missing")  # the tenant exists; its clearing account does not yet
    error = refused(database, scope("missing", "k"), new("acct_00000000000000000000000000"), AccountNotFound)
    assert isinstance(error, AccountNotFound) and error.param == "destination_account"


def test_a_destination_in_another_currency_is_the_reference_paths_recorded_refusal(database: Database) -> None:
    destination = account(database, "euro", currency="EUR")
    plane(database, scope("euro", "warm"), new(account(database, "euro", code="merchant.usd")))
    error = refused(database, scope("euro", "k"), new(destination), RefusalToRecord)
    assert isinstance(error, RefusalToRecord) and '"error":"currency_mismatch"' in error.outcome.body
    if not database.is_postgres:  # the destination was refused, not the clearing account: still known
        assert ledger.system_account_ids(database).get("euro", accept_plan.clearing_template("USD").code)


def test_the_clearing_account_as_destination_is_the_reference_paths(database: Database) -> None:
    destination = account(database, "loop")
    plane(database, scope("loop", "warm"), new(destination))
    with database.read() as connection:
        clearing = ledger.find_account_by_code(connection, "loop", accept_plan.clearing_template("USD").code)
    assert clearing is not None
    answer, calls = accepted(database, scope("loop", "k"), new(clearing.id))
    assert calls == 1  # whatever the ledger's rules answer, they are the reference path's
    assert not isinstance(answer, Payment) or answer.destination_account_id == clearing.id


def test_a_stale_cached_clearing_account_falls_back_and_is_forgotten(database: Database) -> None:
    """An id cached from another database moves nothing: the reference path writes the payment."""
    destination = account(database, "stale")
    code = accept_plan.clearing_template("USD").code
    ledger.system_account_ids(database).put("stale", {code: "acct_x"})
    answer, calls = accepted(database, scope("stale", "k"), new(destination))
    assert isinstance(answer, Payment)
    if database.is_postgres:  # PostgreSQL's call never reads the cache: it ensures the account itself
        assert calls == 0
    else:
        assert calls == 1 and ledger.system_account_ids(database).get("stale", code) is None
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


@pytest.mark.parametrize("capture", ["automatic", "manual"])
def test_below_0036_postgresql_takes_the_reference_path(database: Database, capture: str) -> None:
    """Without `paycore_payments_accept` of 0036's signature (a schema at 0035, which this code
    runs on, has 0027's only: SQLSTATE 42883), the reference path writes the payment."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL only: SQLite's list needs no function")
    destination = account(database, "old")
    with database.engine.begin() as connection:
        connection.execute(text(f"DROP FUNCTION {ACCEPT_0036._ACCEPT}"))
    answer, calls = accepted(database, scope("old", "k"), new(destination, capture=capture))
    assert isinstance(answer, Payment) and calls == 1 and answer.capture_method == capture
    assert row_counts(database)["payments"] == 1


def test_the_0027_signature_accepts_an_automatic_payment_as_before(database: Database) -> None:
    """The release before calls 0027's signature, which 0036 makes a call of its own with
    `'automatic'`: it writes what it always wrote."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL only")
    destination = account(database, "before")
    plan = accept_plan.plan_accept(
        scope("before", "k"),
        new(destination, 300),
        processing_stale_ms=TIMINGS.processing_stale_ms,
        clearing_account_id=None,
        context=EventContext.current(),
        new_ids=accept_plan.NewIds("pay_before", "txn_before", "acct_before", "ent_b1", "ent_b2", "evt_before"),
    )
    assert plan is not None
    old_params = accept_repository.call_params(plan)[:-1]  # 0027's: all but the capture method
    placeholders = ["%s"] * len(old_params)
    placeholders[11] = "%s::text[]"  # the entries' ids
    with database.engine.begin() as connection:
        written = connection.exec_driver_sql(
            f"SELECT paycore_payments_accept({', '.join(placeholders)})", tuple(old_params)
        ).scalar()
    assert written is True
    with database.read() as connection:
        payment = service.MACHINE.load(connection, "before", "pay_before")
    assert (payment.capture_method, payment.status, payment.amount_minor) == ("automatic", "processing", 300)


# ------------------------------------------------------------------ processes racing one key

RACERS = 6


def _race(url: str, destination: str, through_plane: bool, barrier: Any, results: Any) -> None:
    """One process: accept the payment of key `k` (half of them through the data plane, half
    through the reference path), started together."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    try:
        key_scope, payment = scope("race", "k"), new(destination)
        reference = Reference(database, key_scope, payment)
        barrier.wait(timeout=60)
        if through_plane:
            answer: Any = accept.accept(
                database, key_scope, payment, processing_stale_ms=TIMINGS.processing_stale_ms, reference=reference
            )
        else:
            answer = reference()
        results.put("payment" if isinstance(answer, Payment) else repr(answer))
    finally:
        database.dispose()


def test_processes_racing_one_key_make_one_payment(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    destination = account(database, "race")
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(RACERS), context.Queue()
    processes = [
        context.Process(target=_race, args=(settings.database_url, destination, index % 2 == 0, barrier, results))
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    answers = sorted(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert answers == ["None"] * (RACERS - 1) + ["payment"], answers  # the others find the key open
    counts = row_counts(database)
    assert (counts["payments"], counts["ledger_transfers"], counts["ledger_entries"]) == (1, 1, 2)
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        held = ledger.get_account(connection, "race", destination)
    assert held.balance.pending_minor == 1_000
