"""A payout's creating phase (`POST /v1/payouts`) on the data plane (ADR 0026 step 3, issue 39):
what it costs in SQL, counted (never timed) on each database; that it writes exactly the rows
the reference path (the route's effect: `service.schedule` and the `api_call` event inside
`idempotency.run`) writes for the same request; that everything but a success written at once
is the reference path's to decide; and that processes paying out of one source never overdraw
it, and racing one key make one payout.

Counted as tests/integration/payments/test_statement_counts.py counts (every statement the
driver runs, a SQLite group's BEGIN IMMEDIATE included, and every commit), around the phase
alone (`create.create`, below the HTTP edge). `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints
them. The reference path, counted the same way (`REFERENCE_STATEMENTS`): the claim, the
source's read, the four payout accounts' read, the transfer, two totals, the entries, the
payout, its two events, the history's read and the key's answer: 12 statements and a commit
(and BEGIN IMMEDIATE on SQLite); 17 on the tenant's first payout (the accounts' creation and
their second read).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.audit import service as audit
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.http.routers.payouts import SCHEDULE
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors
from paycore.kit.errors import InvalidRequest
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payouts import create, create_plan, schemas, service
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary
from tests.support.rows import named_rows, row_counts
from tests.support.statements import counting

NOW_US = 1_700_000_000_000_000  # 2023-11-14 UTC
ACTOR = actors.LOCAL
ACH = Beneficiary("Ada Lovelace", routing_number="110000000", account_number="000123456789")
SEPA = Beneficiary("Émilie du Châtelet", iban="DE89 3704 0044 0532 0130 00", bic="COBADEFFXXX")
# A payout of a tenant whose in-transit account this process has written to, the phase alone.
# PostgreSQL: the one call (autocommit: no BEGIN, no COMMIT of the client's). SQLite: BEGIN
# IMMEDIATE, the key's claim with its answer, the two accounts' totals, the transfer, its
# entries, the payout, its two events (ADR 0026's fixed list), and the group's commit.
STATEMENTS = {"sqlite": 8, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}
# The tenant's first payout on SQLite adds the four accounts' read and creation.
FIRST_STATEMENTS = {"sqlite": 13, "postgresql": 1}
# The reference path, the same request (the tenant's accounts known): see the docstring.
REFERENCE_STATEMENTS = {"sqlite": 13, "postgresql": 12}


def scope(tenant_id: str, key: str, *, fingerprint: str = "f" * 64, now_us: int = NOW_US) -> KeyScope:
    return KeyScope(tenant_id, key, fingerprint, now_us=now_us, expires_at_us=None)


def new(source_id: str, amount_minor: int = 2_500, *, key: str = "k", **changes: Any) -> NewPayout:
    values: dict[str, Any] = {
        "amount_minor": amount_minor,
        "currency": "USD",
        "source_account_id": source_id,
        "rail": "ach",
        "beneficiary": ACH,
        "metadata": {"invoice": "7"},
        "idempotency_key": key,
    }
    return NewPayout(**{**values, **changes})


def funded(database: Database, tenant_id: str, amount_minor: int, *, currency: str = "USD") -> str:
    """A credit-normal account (not no_overdraft: the hold's guard alone keeps it whole) holding
    `amount_minor`, with codes and times the same for every tenant (so rows compare)."""

    def work(connection: Connection) -> str:
        accounts = [
            ledger.create_account(
                connection,
                tenant_id,
                code=f"{name}.{currency.lower()}",
                currency=currency,
                normal_balance=normal,
                no_overdraft=False,
                metadata={},
                now_us=NOW_US - 10,
            )
            for name, normal in (("seller", "credit"), ("funding", "debit"))
        ]
        source, funding = accounts
        if amount_minor:
            entries = (EntrySpec(funding.id, "debit", amount_minor), EntrySpec(source.id, "credit", amount_minor))
            ledger.create_transfer(connection, tenant_id, TransferSpec(entries=entries), now_us=NOW_US - 5)
        return source.id

    return database.transaction(work)


class Reference:
    """The reference path, as the route runs it (`routers.payouts.schedule_answer`'s effect),
    counted: how often the data plane handed a request to it."""

    def __init__(self, database: Database, key_scope: KeyScope, payout: NewPayout) -> None:
        self.database, self.scope, self.payout, self.calls = database, key_scope, payout, 0

    def effect(self, connection: Connection) -> Outcome:
        tenant_id, now_us = self.scope.tenant_id, self.scope.now_us
        payout = service.schedule(connection, tenant_id, self.payout, now_us=now_us, actor=ACTOR)
        audit.record_api_call(
            connection,
            tenant_id,
            object_type="payout",
            object_id=payout.id,
            operation=SCHEDULE,
            status=201,
            outcome="accepted",
            actor=ACTOR,
            now_us=now_us,
            data={"idempotency_key": self.scope.key},
        )
        return Outcome(201, dumps(schemas.payout_json(payout, service.history(connection, payout))))

    def __call__(self) -> Outcome:
        self.calls += 1
        outcome, _ = idempotency.run(self.database, self.scope, self.effect, render_refusal)
        return outcome


def created(database: Database, key_scope: KeyScope, payout: NewPayout) -> tuple[Outcome, int]:
    """The phase's answer, and how often it ran the reference path."""
    reference = Reference(database, key_scope, payout)
    answer = create.create(database, key_scope, payout, actor=ACTOR, encode=dumps, reference=reference)
    return answer, reference.calls


def never() -> Outcome:
    raise AssertionError("the data plane was expected to write this payout itself")


def plane(database: Database, key_scope: KeyScope, payout: NewPayout) -> Outcome:
    answer = create.create(database, key_scope, payout, actor=ACTOR, encode=dumps, reference=never)
    assert answer.status == 201
    return answer


def test_the_operation_is_the_routes() -> None:
    assert create_plan.OPERATION == SCHEDULE


def test_create_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    source = funded(database, "count", 10_000)
    dialect = database.engine.dialect.name
    with counting(database) as first:
        plane(database, scope("count", "first"), new(source, key="first"))  # this process learns the accounts
    assert len([sql for sql in first if sql != "COMMIT"]) == FIRST_STATEMENTS[dialect], first
    with counting(database) as statements:
        answer = plane(database, scope("count", "second", now_us=NOW_US + 1), new(source, 700, key="second"))
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_payouts_create("), run
    assert '"status":"scheduled"' in answer.body and '"amount_minor":700' in answer.body
    assert "000123456789" not in answer.body  # the account number's last four only
    with database.read() as connection:
        held = ledger.get_account(connection, "count", source)
        in_transit = ledger.find_account_by_code(connection, "count", create_plan.in_transit_code("USD"))
    assert (held.balance.posted_minor, held.balance.pending_minor) == (10_000, -3_200)  # the holds, both
    assert held.balance.available_minor == 6_800
    assert in_transit is not None and in_transit.balance.pending_minor == 3_200


def test_the_reference_paths_count_is_what_the_docstring_says(database: Database) -> None:
    source = funded(database, "refcount", 10_000)
    Reference(database, scope("refcount", "first"), new(source, key="first"))()
    key_scope = scope("refcount", "second", now_us=NOW_US + 1)
    with counting(database) as statements:
        assert Reference(database, key_scope, new(source, 700, key="second"))().status == 201
    run = [sql for sql in statements if sql != "COMMIT"]
    assert len(run) == REFERENCE_STATEMENTS[database.engine.dialect.name], run


def rows_of(database: Database, tenant_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row the phase writes for the tenant, in an order both paths share, with its ids
    (and the tenant's) replaced by their order of first appearance."""
    queries = {
        "payouts": "SELECT * FROM payouts WHERE tenant_id = :t ORDER BY created_at_us",
        "ledger_transfers": "SELECT * FROM ledger_transfers WHERE tenant_id = :t ORDER BY created_at_us",
        "ledger_accounts": "SELECT * FROM ledger_accounts WHERE tenant_id = :t ORDER BY code",
        "ledger_entries": "SELECT * FROM ledger_entries WHERE tenant_id = :t ORDER BY created_at_us, direction",
        "events": "SELECT * FROM events WHERE tenant_id = :t ORDER BY created_at_us, kind DESC",
        "idempotency_keys": 'SELECT * FROM idempotency_keys WHERE tenant_id = :t ORDER BY "key"',
    }
    return named_rows(database, tenant_id, queries)


def test_the_rows_are_the_reference_paths(database: Database) -> None:
    """The same requests, one tenant through the data plane, another through the reference
    path: the same payouts, holds, entries, events (snapshots, sequences), keys with their
    answers, and account totals (the payout accounts created on the first)."""
    sources = {tenant: funded(database, tenant, 9_007_199_254_740_991) for tenant in ("plane", "reference")}
    requests: tuple[dict[str, Any], ...] = (
        {"amount_minor": 1_000},
        {"amount_minor": 250, "execute_on": "2023-12-01"},
        {"amount_minor": 9_007_199_254_740_991 - 1_250, "metadata": {}},
    )
    for index, changes in enumerate(requests):
        key_scope = scope("plane", f"k{index}", now_us=NOW_US + index)
        plane(database, key_scope, new(sources["plane"], key=f"k{index}", **changes))
        reference_scope = replace(key_scope, tenant_id="reference")
        assert Reference(database, reference_scope, new(sources["reference"], key=f"k{index}", **changes))().status
    written, expected = rows_of(database, "plane"), rows_of(database, "reference")
    assert [len(rows) for rows in written.values()] == [3, 4, 6, 8, 6, 3]
    for table in expected:
        for mine, theirs in zip(written[table], expected[table], strict=True):
            assert mine == theirs, (table, {k: (v, theirs[k]) for k, v in mine.items() if theirs[k] != v})
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert ledger.get_account(connection, "plane", sources["plane"]).balance.available_minor == 0


def test_a_sepa_payout_is_the_reference_paths_too(database: Database) -> None:
    sources = {tenant: funded(database, tenant, 5_000, currency="EUR") for tenant in ("plane", "reference")}
    payout = new(sources["plane"], currency="EUR", rail="sepa", beneficiary=SEPA)
    plane(database, scope("plane", "k"), payout)
    Reference(database, scope("reference", "k"), replace(payout, source_account_id=sources["reference"]))()
    assert rows_of(database, "plane") == rows_of(database, "reference")


def test_a_key_that_exists_is_replayed_by_the_reference_path(database: Database) -> None:
    source = funded(database, "again", 10_000)
    first = plane(database, scope("again", "k"), new(source))
    assert created(database, scope("again", "k", now_us=NOW_US + 5), new(source)) == (first, 1)
    assert row_counts(database)["payouts"] == 1


def test_a_reused_key_is_refused_by_the_reference_path(database: Database) -> None:
    source = funded(database, "reuse", 10_000)
    plane(database, scope("reuse", "k", fingerprint="a" * 64), new(source))
    with pytest.raises(IdempotencyKeyReused):
        created(database, scope("reuse", "k", fingerprint="b" * 64), new(source, 5))
    assert row_counts(database)["payouts"] == 1


def refused(database: Database, key_scope: KeyScope, payout: NewPayout) -> Outcome:
    """The reference path's recorded refusal, after a data-plane write that wrote nothing: no
    payout, no hold; the key holds the refusal."""
    before = row_counts(database)
    answer, calls = created(database, key_scope, payout)
    assert calls == 1
    after = row_counts(database)
    assert {table: after[table] - count for table, count in before.items() if after[table] != count} == {
        "idempotency_keys": 1
    }
    return answer


def test_insufficient_available_funds_is_the_reference_paths_recorded_refusal(database: Database) -> None:
    source = funded(database, "short", 3_000)
    plane(database, scope("short", "warm"), new(source, 2_000, key="warm"))  # the accounts known
    answer = refused(database, scope("short", "k"), new(source, 1_001))  # 1,000 left available
    assert answer.status == 422 and '"error":"insufficient_funds"' in answer.body
    plane(database, scope("short", "k2"), new(source, 1_000, key="k2"))  # exactly what is left


def test_a_missing_source_is_the_reference_paths_refusal(database: Database) -> None:
    """Refused by the reference path, not recorded (a 404: the key stays free)."""
    funded(database, "missing", 0)
    before = row_counts(database)
    reference = Reference(database, scope("missing", "k"), new("acct_00000000000000000000000000"))
    with pytest.raises(AccountNotFound) as raised:
        create.create(database, reference.scope, reference.payout, actor=ACTOR, encode=dumps, reference=reference)
    assert raised.value.param == "source_account" and reference.calls == 1
    assert row_counts(database) == before


def test_a_source_in_another_currency_is_the_reference_paths_refusal(database: Database) -> None:
    source = funded(database, "euro", 10_000, currency="EUR")
    answer = refused(database, scope("euro", "k"), new(source))  # a USD payout from a EUR account
    assert answer.status == 422 and '"error":"currency_mismatch"' in answer.body


def test_a_system_account_as_source_is_the_reference_paths(database: Database) -> None:
    source = funded(database, "loop", 10_000)
    plane(database, scope("loop", "warm"), new(source, key="warm"))
    with database.read() as connection:
        in_transit = ledger.find_account_by_code(connection, "loop", create_plan.in_transit_code("USD"))
    assert in_transit is not None
    answer, calls = created(database, scope("loop", "k"), new(in_transit.id))
    assert calls == 1 and answer.status == 422  # whatever the ledger's rules answer is theirs


@pytest.mark.parametrize(
    "changes",
    [
        {"beneficiary": Beneficiary("Ada", routing_number="110000001", account_number="000123456789")},
        {"beneficiary": Beneficiary("Ada", routing_number="110000000", account_number="12")},
        {"beneficiary": Beneficiary("Ada", iban="DE00370400440532013000")},
        {"currency": "EUR"},
        {"execute_on": "2023-11-13"},
        {"amount_minor": 0},
    ],
    ids=["routing", "account_number", "iban_on_ach", "rail_currency", "past", "amount"],
)
def test_a_request_its_rules_refuse_is_the_reference_paths(database: Database, changes: dict[str, Any]) -> None:
    """A bank account or beneficiary, rail, date or amount the rules refuse: planned as
    nothing, answered by the reference path (a 400, not recorded: the key stays free)."""
    source = funded(database, "rules", 10_000)
    before = row_counts(database)
    reference = Reference(database, scope("rules", "k"), new(source, **changes))
    with pytest.raises(InvalidRequest):
        create.create(database, reference.scope, reference.payout, actor=ACTOR, encode=dumps, reference=reference)
    assert reference.calls == 1 and row_counts(database) == before


def test_a_stale_cached_in_transit_account_falls_back_and_is_forgotten(database: Database) -> None:
    source = funded(database, "stale", 10_000)
    code = create_plan.in_transit_code("USD")
    ledger.system_account_ids(database).put("stale", {code: "acct_x"})
    answer, calls = created(database, scope("stale", "k"), new(source))
    assert answer.status == 201
    if database.is_postgres:  # PostgreSQL's call never reads the cache: it ensures the accounts itself
        assert calls == 0
    else:
        assert calls == 1 and ledger.system_account_ids(database).get("stale", code) is None
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_below_its_revision_postgresql_takes_the_reference_path(database: Database) -> None:
    """Without `paycore_payouts_create` (a schema at the revision before, which this code runs
    on: SQLSTATE 42883), the reference path writes the payout."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL only: SQLite's list needs no function")
    source = funded(database, "old", 10_000)
    with database.engine.begin() as connection:
        connection.execute(text("DROP FUNCTION paycore_payouts_create"))
    answer, calls = created(database, scope("old", "k"), new(source))
    assert answer.status == 201 and calls == 1
    assert row_counts(database)["payouts"] == 1


# ------------------------------------------------------------------ processes paying out at once

RACERS = 6
FUNDED_MINOR = 10_000
PAYOUT_MINOR = 3_000  # three fit in the source, three do not


def _race(url: str, source: str, key: str, through_plane: bool, barrier: Any, results: Any) -> None:
    """One process: pay out of `source` under `key` (half of them through the data plane, half
    through the reference path), started together."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    try:
        key_scope, payout = scope("race", key), new(source, PAYOUT_MINOR, key=key)
        reference = Reference(database, key_scope, payout)
        barrier.wait(timeout=60)
        if through_plane:
            answer = create.create(database, key_scope, payout, actor=ACTOR, encode=dumps, reference=reference)
        else:
            answer = reference()
        results.put((answer.status, answer.body))
    finally:
        database.dispose()


def _racing(settings: Settings, source: str, keys: list[str]) -> list[tuple[int, str]]:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(keys)), context.Queue()
    processes = [
        context.Process(target=_race, args=(settings.database_url, source, key, index % 2 == 0, barrier, results))
        for index, key in enumerate(keys)
    ]
    for process in processes:
        process.start()
    answers = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return answers


def test_processes_paying_out_of_one_source_never_overdraw_it(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    source = funded(database, "race", FUNDED_MINOR)
    answers = _racing(settings, source, [f"k{index}" for index in range(RACERS)])
    statuses = sorted(status for status, _ in answers)
    assert statuses == [201] * 3 + [422] * 3, answers
    assert all('"error":"insufficient_funds"' in body for status, body in answers if status == 422)
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        balance = ledger.get_account(connection, "race", source).balance
    assert (balance.pending_minor, balance.available_minor) == (-3 * PAYOUT_MINOR, FUNDED_MINOR - 3 * PAYOUT_MINOR)
    assert row_counts(database)["payouts"] == 3


def test_processes_racing_one_key_make_one_payout(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    source = funded(database, "race", FUNDED_MINOR)
    answers = _racing(settings, source, ["same"] * RACERS)
    assert len(set(answers)) == 1 and answers[0][0] == 201, answers  # one answer, replayed to the others
    counts = row_counts(database)
    assert (counts["payouts"], counts["ledger_transfers"], counts["ledger_entries"]) == (1, 2, 4)
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert ledger.get_account(connection, "race", source).balance.pending_minor == -PAYOUT_MINOR
