"""A refund's creating phase on the data plane (ADR 0026 step 3, issue 39): what it costs in
SQL, counted (never timed) on each database; that it writes exactly the rows the reference path
(`create.reference`: `service.create_refund` inside `idempotency.run`, as the route runs it)
writes for the same request; that everything but a plain success written at once is the
reference path's to decide; and that processes refunding one payment never pass its ceiling.

Counted as tests/integration/payments/test_statement_counts.py counts (every statement the
driver runs, a SQLite group's BEGIN IMMEDIATE included, and every commit), around the phase
alone (`create.create_refund`, below the HTTP edge). `PAYCORE_PRINT_STATEMENTS=1` (pytest -s)
prints them.

Before the data plane (the reference path, main at 0e5bf3e, counted the same way; the
statement-count test's first group for a refund): BEGIN IMMEDIATE and 12 statements on SQLite
(the claim, the tenant's settings, the ceiling's UPDATE, the clearing account's read, the
transfer, two totals, the entries, the refund, the event, the events read back, the key's
answer) and 1 commit; the same 12 without BEGIN and 1 commit on PostgreSQL
(`REFERENCE_STATEMENTS` holds them).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors, ids
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.payments.errors import PaymentNotFound
from paycore.refunds import create, schemas
from paycore.refunds.create_plan import RefundRequest
from paycore.refunds.errors import PaymentNotRefundable
from paycore.tenants import settings as tenant_settings
from tests.support.rows import named_rows, row_counts
from tests.support.statements import counting

NOW_US = 1_700_000_000_000_000
# A refund of a payment whose facts (and, on SQLite, whose clearing account) this process has
# seen, the phase alone. PostgreSQL: the one call (autocommit: no BEGIN, no COMMIT of the
# client's). SQLite: BEGIN IMMEDIATE, the key's claim with its answer, the ceiling's UPDATE
# (the threshold read inside it), the two accounts' totals, the transfer, its entries, the
# refund, its event (ADR 0026's fixed list), and the group's commit.
STATEMENTS = {"sqlite": 9, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}
# The first refund of a payment this process has not seen adds its read: on PostgreSQL the
# payment, before the call on its connection (autocommit: no commit); on SQLite, in the write's
# transaction, the payment and the clearing account by its code (where this process has not
# seen it: here, the payment was imported by SQLAlchemy Core, which fills no cache).
FIRST_STATEMENTS = {"sqlite": 11, "postgresql": 2}
# The reference path, counted the same way (held here, so the comparison stays true): the claim,
# the tenant's settings, the ceiling's UPDATE, the clearing account's read, the transfer, two
# totals, the entries, the refund, the event, the events read back, the key's answer (and
# SQLite's BEGIN IMMEDIATE), in a transaction of the client's.
REFERENCE_STATEMENTS = {"sqlite": 13, "postgresql": 12}


def render(refund: Any, history: Any) -> str:
    """The route's answer: `routers/refunds._with_history`, through `idempotent.run`'s dumps."""
    return dumps(schemas.refund_json(refund, history))


def scope(tenant_id: str, key: str, *, fingerprint: str = "f" * 64, now_us: int = NOW_US) -> KeyScope:
    return KeyScope(tenant_id, key, fingerprint, now_us=now_us, expires_at_us=None)


def ask(payment_id: str, amount_minor: int = 100, reason: str | None = "damaged") -> RefundRequest:
    return RefundRequest(payment_id, amount_minor, reason, actors.LOCAL)


def paid(database: Database, tenant_id: str, amount_minor: int = 1_000, *, status: str = "succeeded") -> str:
    """A payment of the tenant, settled (its clearing account exists); its id. Ids are counters
    of the tenant so that two tenants' rows compare equal."""

    def work(connection: Connection) -> str:
        merchant = ledger.create_account(
            connection, tenant_id, code=f"merchant.{amount_minor}", currency="USD", normal_balance="credit",
            no_overdraft=False, metadata={}, now_us=NOW_US,
        ).id  # fmt: skip
        payment = payments.import_settled_payment(
            connection, tenant_id, payment_id=ids.new_id("pay"), amount_minor=amount_minor, currency="USD",
            destination_account_id=merchant, now_us=NOW_US,
        )  # fmt: skip
        if status != "succeeded":
            connection.execute(
                text("UPDATE payments SET status = :s WHERE tenant_id = :t AND id = :p"),
                {"s": status, "t": tenant_id, "p": payment.id},
            )
        return payment.id

    return database.transaction(work)


def threshold(database: Database, tenant_id: str, threshold_minor: int | None) -> None:
    database.transaction(
        lambda connection: tenant_settings.set(
            connection,
            tenant_id,
            lambda current: replace(current, refund_approval_threshold_minor=threshold_minor),
            actor=actors.LOCAL,
            by_approver=True,
            now_us=NOW_US,
        )
    )


REFERENCE = create.reference  # the reference path itself, as the tests call it directly


class Reference:
    """The reference path, counted: how often the data plane handed a request to it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Outcome, bool]:
        self.calls += 1
        return REFERENCE(*args, **kwargs)


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> Reference:
    """Counts the phase's hand-overs to the reference path (the path itself runs unchanged)."""
    counted = Reference()
    monkeypatch.setattr(create, "reference", counted)
    return counted


def refund(database: Database, key_scope: KeyScope, request: RefundRequest) -> tuple[Outcome, bool]:
    return create.create_refund(database, key_scope, request, render=render, render_refusal=render_refusal)


def test_the_phase_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    database: Database, reference: Reference
) -> None:
    payment_id = paid(database, "count")
    dialect = database.engine.dialect.name
    with counting(database) as first:
        refund(database, scope("count", "first"), ask(payment_id))  # this process learns the payment
    assert len([sql for sql in first if sql != "COMMIT"]) == FIRST_STATEMENTS[dialect], first
    assert first.count("COMMIT") == COMMITS[dialect], first
    with counting(database) as statements:
        outcome, replayed = refund(database, scope("count", "second", now_us=NOW_US + 1), ask(payment_id, 250))
    commits = statements.count("COMMIT")
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), commits) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_refunds_create("), run
    assert reference.calls == 0 and not replayed and outcome.status == 201
    assert '"status":"pending"' in outcome.body and '"amount_minor":250' in outcome.body
    with counting(database) as before:
        answer, _ = REFERENCE(
            database, scope("count", "third", now_us=NOW_US + 2), ask(payment_id, 50), render=render,
            render_refusal=render_refusal,
        )  # fmt: skip
    assert answer.status == 201
    counted = [sql for sql in before if sql != "COMMIT"]
    assert (len(counted), before.count("COMMIT")) == (REFERENCE_STATEMENTS[dialect], 1), counted
    with database.read() as connection:
        payment = payments.MACHINE.load(connection, "count", payment_id)
        held = ledger.get_account(connection, "count", payment.destination_account_id)
    assert payment.refunded_minor == 400
    # credit-normal: the holds are pending debits (-400), and available is posted less them
    assert (held.balance.posted_minor, held.balance.pending_minor, held.balance.available_minor) == (1_000, -400, 600)


def rows_of(database: Database, tenant_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row the phase writes for the tenant (and the payment it reserves on), in an order
    both paths share, with its ids (and the tenant's) replaced by their order of first
    appearance."""
    queries = {
        "payments": "SELECT * FROM payments WHERE tenant_id = :t ORDER BY amount_minor",
        "refunds": "SELECT * FROM refunds WHERE tenant_id = :t ORDER BY created_at_us",
        "ledger_transfers": "SELECT * FROM ledger_transfers WHERE tenant_id = :t ORDER BY created_at_us, kind",
        "ledger_accounts": "SELECT * FROM ledger_accounts WHERE tenant_id = :t ORDER BY code",
        "ledger_entries": "SELECT * FROM ledger_entries WHERE tenant_id = :t ORDER BY created_at_us, direction",
        "events": "SELECT * FROM events WHERE tenant_id = :t AND object_type = 'refund' ORDER BY created_at_us",
        "idempotency_keys": 'SELECT * FROM idempotency_keys WHERE tenant_id = :t ORDER BY "key"',
    }
    return named_rows(database, tenant_id, queries)


@pytest.mark.parametrize("threshold_minor", [None, 5_000, 9_007_199_254_740_991])
def test_the_rows_are_the_reference_paths(
    database: Database, reference: Reference, threshold_minor: int | None
) -> None:
    """The same requests, one tenant through the data plane, another through the reference
    path: the same refunds, payments' refunded_minor, transfers, entries, totals, events (with
    their snapshot and object_sequence) and keys with their answers."""
    payment_ids = {tenant: paid(database, tenant, 9_007_199_254_740_991) for tenant in ("plane", "reference")}
    for tenant in payment_ids:
        threshold(database, tenant, threshold_minor)
    for index, (amount_minor, reason) in enumerate(((1_000, "damaged"), (1, None), (3_999, "late"))):
        key_scope = scope("plane", f"k{index}", now_us=NOW_US + 1 + index)
        outcome, _ = refund(database, key_scope, ask(payment_ids["plane"], amount_minor, reason))
        expected, _ = REFERENCE(
            database,
            replace(key_scope, tenant_id="reference"),
            ask(payment_ids["reference"], amount_minor, reason),
            render=render,
            render_refusal=render_refusal,
        )
        assert outcome.status == expected.status == 201
    assert reference.calls == 0
    written, expected_rows = rows_of(database, "plane"), rows_of(database, "reference")
    assert [len(rows) for rows in written.values()] == [1, 3, 4, 2, 8, 3, 3]
    for table in expected_rows:
        for mine, theirs in zip(written[table], expected_rows[table], strict=True):
            assert mine == theirs, (table, {k: (v, theirs[k]) for k, v in mine.items() if theirs[k] != v})
    assert written["payments"][0]["refunded_minor"] == 5_000
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_a_key_that_exists_is_the_reference_paths(database: Database, reference: Reference) -> None:
    payment_id = paid(database, "again")
    key_scope = scope("again", "k")
    first, replayed = refund(database, key_scope, ask(payment_id))
    assert not replayed and reference.calls == 0
    assert refund(database, key_scope, ask(payment_id)) == (first, True)
    assert reference.calls == 1
    with pytest.raises(IdempotencyKeyReused):
        refund(database, replace(key_scope, request_fingerprint="b" * 64), ask(payment_id, 5))
    assert row_counts(database)["refunds"] == 1


def refused(database: Database, reference: Reference, key_scope: KeyScope, request: RefundRequest) -> Outcome:
    """The reference path's recorded refusal, after a data-plane write that wrote nothing."""
    outcome, replayed = refund(database, key_scope, request)
    assert reference.calls == 1 and not replayed
    assert row_counts(database)["refunds"] == 0
    return outcome


def test_over_the_ceiling_is_the_reference_paths_refusal(database: Database, reference: Reference) -> None:
    payment_id = paid(database, "over")
    refund(database, scope("over", "warm"), ask(payment_id, 1_000))  # all of it, through the plane
    database.transaction(lambda connection: connection.execute(text("DELETE FROM refunds")))  # counted below
    outcome = refused(database, reference, scope("over", "k"), ask(payment_id, 1))
    assert outcome.status == 422 and '"error":"over_refund"' in outcome.body


def test_a_payment_not_succeeded_is_the_reference_paths_refusal(database: Database, reference: Reference) -> None:
    payment_id = paid(database, "failed", status="failed")
    with pytest.raises(PaymentNotRefundable):
        refund(database, scope("failed", "k"), ask(payment_id))
    assert reference.calls == 1 and row_counts(database)["refunds"] == 0


def test_a_payment_no_longer_succeeded_is_refused_by_the_write(database: Database, reference: Reference) -> None:
    """Its facts cached as a succeeded payment's: the write's reservation refuses, nothing is
    written, the reference path answers."""
    payment_id = paid(database, "moved")
    refund(database, scope("moved", "warm"), ask(payment_id))
    change = text("UPDATE payments SET status = 'failed' WHERE tenant_id = 'moved'")
    database.transaction(lambda connection: connection.execute(change))
    before = row_counts(database)
    with pytest.raises(PaymentNotRefundable):
        refund(database, scope("moved", "k"), ask(payment_id))
    assert reference.calls == 1 and row_counts(database) == before


def test_a_missing_payment_is_the_reference_paths(database: Database, reference: Reference) -> None:
    paid(database, "missing")
    with pytest.raises(PaymentNotFound):
        refund(database, scope("missing", "k"), ask("pay_00000000000000000000000000"))
    assert reference.calls == 1


def test_a_bad_amount_is_the_reference_paths(database: Database, reference: Reference) -> None:
    payment_id = paid(database, "bad")
    with pytest.raises(Exception, match="amount_minor must be a positive integer"):
        refund(database, scope("bad", "k"), ask(payment_id, 0))
    assert reference.calls == 1 and row_counts(database)["idempotency_keys"] == 0


@pytest.mark.parametrize("threshold_minor", [0, 99, 100, 150, 199, 200])
def test_a_refund_that_needs_approval_is_the_reference_paths(
    database: Database, reference: Reference, threshold_minor: int
) -> None:
    """Past the threshold by sum (this refund, or with the one before it): the write refuses,
    the reference path stores it `requires_approval`; within it, the plane writes `pending`."""
    payment_id = paid(database, "eyes")
    threshold(database, "eyes", threshold_minor)
    first, _ = refund(database, scope("eyes", "a"), ask(payment_id, 100))
    second, _ = refund(database, scope("eyes", "b", now_us=NOW_US + 1), ask(payment_id, 100))
    statuses = ['"status":"pending"' in answer.body for answer in (first, second)]
    assert statuses == [threshold_minor >= 100, threshold_minor >= 200]
    assert reference.calls == statuses.count(False)
    waiting = [answer for answer, ok in zip((first, second), statuses, strict=True) if not ok]
    assert all('"status":"requires_approval"' in answer.body for answer in waiting)


def test_without_the_function_postgresql_takes_the_reference_path(database: Database, reference: Reference) -> None:
    """Without `paycore_refunds_create` (a schema below its revision, which this code runs on:
    SQLSTATE 42883), the reference path writes the refund."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL only: SQLite's list needs no function")
    payment_id = paid(database, "old")
    with database.engine.begin() as connection:
        connection.execute(text("DROP FUNCTION paycore_refunds_create"))
    outcome, _ = refund(database, scope("old", "k"), ask(payment_id))
    assert outcome.status == 201 and reference.calls == 1
    assert row_counts(database)["refunds"] == 1


def test_a_stale_cached_clearing_account_falls_back_and_is_forgotten(database: Database, reference: Reference) -> None:
    if database.is_postgres:
        pytest.skip("SQLite only: PostgreSQL's call finds the clearing account by its code")
    payment_id = paid(database, "stale")
    refund(database, scope("stale", "warm"), ask(payment_id))  # facts and clearing account cached
    code = chart.processor_clearing("USD")
    assert ledger.system_account_ids(database).get("stale", code) is not None
    ledger.system_account_ids(database).put("stale", {code: "acct_x"})
    outcome, _ = refund(database, scope("stale", "k"), ask(payment_id))
    assert outcome.status == 201 and reference.calls == 1
    assert ledger.system_account_ids(database).get("stale", code) is None
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


# ------------------------------------------------------------------ processes racing one payment

RACERS = 6


def _race(url: str, payment_id: str, index: int, same_key: bool, barrier: Any, results: Any) -> None:
    """One process: refund 400 of the payment of 1,000 (half through the data plane, half
    through the reference path), started together."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    try:
        key_scope = scope("race", "same" if same_key else f"k{index}")
        request = ask(payment_id, 400, None)
        barrier.wait(timeout=60)
        if index % 2 == 0:
            outcome, replayed = refund(database, key_scope, request)
        else:
            outcome, replayed = REFERENCE(database, key_scope, request, render=render, render_refusal=render_refusal)
        results.put((outcome.status, replayed, outcome.body))
    finally:
        database.dispose()


def _racing(database: Database, settings: Settings, payment_id: str, *, same_key: bool) -> list[Any]:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(RACERS), context.Queue()
    processes = [
        context.Process(target=_race, args=(settings.database_url, payment_id, index, same_key, barrier, results))
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    answers = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return answers


@pytest.mark.parametrize("same_key", [False, True])
def test_processes_refunding_one_payment_never_pass_its_ceiling(
    database: Database, settings: Settings, same_key: bool
) -> None:
    """Different keys: two of 400 fit in 1,000, the others are over_refund; the same key: one
    refund, the others its replay (or told it is still in progress)."""
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    payment_id = paid(database, "race")
    answers = _racing(database, settings, payment_id, same_key=same_key)
    created = [answer for answer in answers if answer[0] == 201 and not answer[1]]
    with database.read() as connection:
        payment = payments.MACHINE.load(connection, "race", payment_id)
        assert ledger.verify(connection).problems == []
        stored = connection.execute(text("SELECT count(*), sum(amount_minor) FROM refunds")).one()
    assert payment.refunded_minor <= payment.amount_minor
    assert stored[1] == payment.refunded_minor
    if same_key:
        assert len(created) == 1 and stored[0] == 1, answers
        assert all(body == created[0][2] for status, _, body in answers if status == 201)
    else:
        assert len(created) == 2 and stored[0] == 2, answers
        assert sorted(status for status, _, _ in answers) == [201, 201] + [422] * (RACERS - 2), answers
