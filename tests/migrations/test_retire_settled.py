"""Retiring the stored payout status `settled` (SPEC §11 "Retiring obsolete states";
docs/migrations.md): a database populated at revision 0004 goes through 0005 (expand), 0006
(backfill) and 0007 (contract) with every row of every table and every ledger sum unchanged,
but for the word stored for a settled payout; the public vocabulary (API, events, filters)
never moves; the contracted database refuses the old word; a downgrade brings it back.
On SQLite and on PostgreSQL."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, insert, inspect, select, text
from sqlalchemy.exc import IntegrityError

from paycore.audit import service as audit
from paycore.credits import service as credits
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify
from paycore.payments import lifecycle as payment_lifecycle
from paycore.payouts import lifecycle, money, repository, schemas, service, states
from paycore.payouts.models import payouts as payouts_table
from paycore.payouts.types import NewPayout, Payout, payout_from_row
from paycore.refunds import lifecycle as refund_lifecycle
from paycore.refunds import service as refunds
from paycore.tenants import service as tenants
from tests.migrations import test_migrations
from tests.support import payouts as support
from tests.support.refunds import create_refund, fail_refund, new_payment, open_merchant

TENANTS = ("acme", "zeta")  # two tenants: the backfill's key ranges cross from one to the other
SETTLED_PER_TENANT = 3
RETURNED_PER_TENANT = 2
BACKFILL_BATCH_ROWS = 3  # many ranges over a few dozen rows
BEFORE, EXPAND, BACKFILL, CONTRACT = "0004", "0005", "0006", "0007"

Snapshot = dict[str, list[dict[str, Any]]]

empty_database = test_migrations.empty_database  # the fixture: a database with no tables at all


@pytest.fixture(autouse=True)
def unpublished() -> Iterator[None]:
    """Today's code writes the rows of revisions 0004 to 0007 here, as the code of those
    revisions did: without publishing its state changes (0015's columns and tables do not exist
    yet). Each machine's snapshot is unset for the test, then restored."""
    machines = (payment_lifecycle.MACHINE, refund_lifecycle.MACHINE, lifecycle.MACHINE)
    saved = [machine.snapshot for machine in machines]
    for machine in machines:
        object.__setattr__(machine, "snapshot", None)  # frozen: set for this test only
    try:
        yield
    finally:
        for each, snapshot in zip(machines, saved, strict=True):
            object.__setattr__(each, "snapshot", snapshot)


# ----------------------------------------------------------------------------- alembic


def alembic(database: Database, action: Callable[[Config, str], None], revision: str, **attributes: Any) -> None:
    """`command.upgrade`/`downgrade`, run as `paycore.db.migrate` runs them."""
    migrate.run(database, lambda config: action(config, revision), **attributes)


def backfill(database: Database) -> None:
    alembic(database, command.upgrade, BACKFILL, payout_backfill_batch_rows_max=BACKFILL_BATCH_ROWS)


# ---------------------------------------------------------------------- the populated database


@dataclass
class Population:
    settled_ids: set[str] = field(default_factory=set)  # stored `settled` at 0004
    returned_ids: set[str] = field(default_factory=set)


def settle_as_0004_code(database: Database, payout: Payout) -> None:
    """What the code of revision 0004 wrote when the bank settled a payout: the columns and
    the ledger transfer of `lifecycle.MACHINE.move(..., SETTLED)`, with the status spelled `settled`
    (today's code writes `succeeded`, which 0004's constraint refuses)."""

    def work(connection: Connection) -> None:
        current = service.MACHINE.load(connection, payout.tenant_id, payout.id, for_update=True)
        assert current.status == states.SENT
        at_us = max(now_us(), current.updated_at_us + 1)
        changed = connection.execute(
            text(
                "UPDATE payouts SET status = 'settled', settled_at_us = :at, updated_at_us = :at,"
                " next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL"
                " WHERE tenant_id = :tenant AND id = :id AND status = 'sent'"
            ),
            {"at": at_us, "tenant": current.tenant_id, "id": current.id},
        ).rowcount
        assert changed == 1
        money.pay_out(connection, current, now_us=at_us)
        audit.record_state_change(
            connection,
            current.tenant_id,
            object_type="payout",
            object_id=current.id,
            from_state="sent",
            to_state="settled",
            cause="bank_settled",
            actor="processor",
            now_us=at_us,
        )

    database.transaction(work)


def schedule_with_key(database: Database, tenant_id: str, source_id: str, amount_minor: int, key: str) -> Payout:
    """A payout scheduled as POST /v1/payouts does: its effect and its idempotency key commit
    together, the key holding the response's body. The source's currency picks the rail."""
    with database.read() as connection:
        currency = ledger.get_account(connection, tenant_id, source_id).currency
    rail, beneficiary = ("ach", support.ACH) if currency == "USD" else ("sepa", support.SEPA)
    new = NewPayout(amount_minor, currency, source_id, rail, beneficiary, idempotency_key=key)
    at_us = now_us()
    request = {"amount_minor": amount_minor, "source_account": source_id, "key": key}
    scope = idempotency.KeyScope(tenant_id, key, idempotency.fingerprint("POST", "/v1/payouts", request), at_us, None)

    def effect(connection: Connection) -> idempotency.Outcome:
        payout = service.schedule(connection, tenant_id, new, actor="local", now_us=at_us)
        return idempotency.Outcome(201, json.dumps(schemas.payout_json(payout), sort_keys=True))

    def refusal(error: DomainError) -> idempotency.Outcome:
        raise AssertionError(f"the fixture's payout was refused: {error}")

    outcome, replayed = idempotency.run(database, scope, effect, refusal)
    assert outcome.status == 201 and not replayed
    with database.read() as connection:
        return service.MACHINE.load(connection, tenant_id, json.loads(outcome.body)["id"])


def payouts_in_every_status(database: Database, tenant_id: str, population: Population) -> None:
    """One payout in each status today's code can write at 0004; settled ones (with a bank
    fee; one on SEPA) and returned ones (settled, then returned) as 0004's code wrote them."""
    usd = support.funded_source(database, tenant_id, 10_000_000)
    eur = support.funded_source(database, tenant_id, 10_000_000, currency="EUR")
    keys = iter(f"payout-{number}" for number in range(100))
    for status in states.STATUSES:
        if status not in (states.SETTLED, states.RETURNED):
            payout = schedule_with_key(database, tenant_id, usd, 1_000 + len(status), next(keys))
            support.move(database, payout, *support.PATH_TO[status])
    for number in range(SETTLED_PER_TENANT + RETURNED_PER_TENANT):
        returned = number >= SETTLED_PER_TENANT
        source = eur if number == 0 else usd
        payout = schedule_with_key(database, tenant_id, source, 20_000 + number, next(keys))
        payout = support.move(database, payout, states.QUEUED, states.PROCESSING, states.SENT)
        settle_as_0004_code(database, payout)
        database.transaction(functools.partial(bank_news, seen=payout, returned=returned))
        (population.returned_ids if returned else population.settled_ids).add(payout.id)


def bank_news(connection: Connection, seen: Payout, returned: bool) -> None:
    """The bank's fee for a settled payout, or its return (100 short: a loss) with a fee."""
    payout = service.MACHINE.load(connection, seen.tenant_id, seen.id, for_update=True)
    at_us = now_us()
    if not returned:
        lifecycle.record_bank_fee(connection, payout, 25, charged_at_us=at_us, actor="processor", now_us=at_us)
        return
    result = lifecycle.record_bank_return(
        connection,
        payout,
        code="R01",
        received_minor=payout.amount_minor - 100,
        return_fee_minor=150,
        returned_at_us=at_us,
        cause="bank_returned",
        actor="processor",
        now_us=at_us,
    )
    assert result == "applied"


def tenant_with_a_credit(database: Database, tenant_id: str) -> None:
    """The tenant and its API key; a credit (its idempotency key kept forever, its transfer)."""

    def work(connection: Connection) -> None:
        at_us = now_us()
        tenants.create_tenant(connection, tenant_id, now_us=at_us)
        credits.create_credit(
            connection,
            tenant_id,
            idempotency_key="credit-1",
            lines=(credits.CreditLine("welcome", 5_000, "USD"),),
            enabled_currencies=frozenset({"USD"}),
            lines_max=10,
            now_us=at_us,
        )

    database.transaction(work)


def ledger_transfers(database: Database, tenant_id: str) -> None:
    """Straight through the ledger service: a plain transfer, a hold posted in part, a hold
    voided, a hold still pending."""

    def work(connection: Connection) -> None:
        at_us = now_us()
        accounts = [
            ledger.create_account(
                connection,
                tenant_id,
                code=code,
                currency="USD",
                normal_balance=normal,
                no_overdraft=False,
                metadata={},
                now_us=at_us,
            ).id
            for code, normal in (("books.source", "debit"), ("books.sink", "credit"))
        ]

        def transfer(amount_minor: int, *, pending: bool) -> str:
            legs = (EntrySpec(accounts[0], "debit", amount_minor), EntrySpec(accounts[1], "credit", amount_minor))
            return ledger.create_transfer(connection, tenant_id, TransferSpec(legs, pending=pending), now_us=at_us).id

        transfer(10_000, pending=False)
        ledger.post_pending(
            connection, tenant_id, transfer(2_500, pending=True), amount_minor=2_000, now_us=at_us, owner_id=None
        )
        ledger.void_pending(connection, tenant_id, transfer(700, pending=True), now_us=at_us, owner_id=None)
        transfer(300, pending=True)

    database.transaction(work)


@contextmanager
def work_columns_named_as_today(database: Database) -> Iterator[None]:
    """Today's code names the round counter of payments and refunds `attempts` (migration
    0012); revision 0004 called it `resolve_attempts`. This chain is about the payouts' stored
    word, so payments and refunds are written by today's code under today's column name and
    the column is renamed back before the chain runs: the rows are the same either way."""
    tables = ("payments", "refunds")
    with database.engine.begin() as connection:
        for table in tables:
            connection.execute(text(f"ALTER TABLE {table} RENAME COLUMN resolve_attempts TO attempts"))
    yield
    with database.engine.begin() as connection:
        for table in tables:
            connection.execute(text(f"ALTER TABLE {table} RENAME COLUMN attempts TO resolve_attempts"))


@contextmanager
def fault_columns_as_today(database: Database) -> Iterator[None]:
    """Today's code reads and writes the work columns `fault_code` and `faulted_at_us` of
    payments, refunds and payouts (migration 0022) with every item it stores, moves or reads;
    the revisions of this chain have none. Where they are missing they are added for what
    today's code does here and dropped after it: NULL in every row, so the rows and the schema
    are the same either way. So are a payment's capture columns (migration 0033): an automatic
    payment's defaults in every row; and its `disputed_minor` (migration 0035): 0 in every row."""
    work = (("fault_code", "VARCHAR(64)"), ("faulted_at_us", "BIGINT"))
    capture = (
        ("capture_method", "VARCHAR(16) NOT NULL DEFAULT 'automatic'"),
        *((name, "BIGINT") for name in ("amount_capturable_minor", "amount_captured_minor")),
        ("authorization_expires_at_us", "BIGINT"),
        *((name, "VARCHAR(16)") for name in ("cancellation_reason", "operation")),
        ("operation_idempotency_key", "VARCHAR(255)"),
        ("capture_requested_minor", "BIGINT"),
        ("disputed_minor", "BIGINT NOT NULL DEFAULT 0"),
    )
    columns = {"payments": (*work, *capture), "refunds": work, "payouts": work}
    with database.engine.begin() as connection:
        inspector = inspect(connection)
        added = [
            (table, name, kind)
            for table in ("payments", "refunds", "payouts")
            for name, kind in columns[table]
            if name not in {column["name"] for column in inspector.get_columns(table)}
        ]
        for table, name, kind in added:
            connection.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))
    yield
    with database.engine.begin() as connection:
        for table, name, _ in reversed(added):
            connection.execute(text(f"ALTER TABLE {table} DROP COLUMN {name}"))


def payments_and_refunds(database: Database, tenant_id: str) -> None:
    """A settled payment with a pending, a failed and a succeeded refund (the stored word the
    payouts now share)."""
    merchant = open_merchant(database, tenant_id)
    payment_id = new_payment(database, tenant_id, merchant, 10_000)
    create_refund(database, tenant_id, payment_id, 1_000)
    assert fail_refund(database, tenant_id, create_refund(database, tenant_id, payment_id, 2_000))
    refund_id = create_refund(database, tenant_id, payment_id, 3_000)

    def succeed(connection: Connection) -> None:
        refund = refunds.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
        assert refund_lifecycle.move(
            connection, refund, "succeeded", cause="test", actor="local", now_us=now_us()
        ).changed

    database.transaction(succeed)


@contextmanager
def ledger_columns_as_today(database: Database) -> Iterator[None]:
    """Today's code writes `ledger_accounts.system` and `ledger_transfers.owner_id` (migration
    0021), which revision 0004 has not. This chain is about the payouts' stored word, so the
    rows are written by today's code with those two columns added for the while, and the
    columns are dropped again before the chain runs: the other columns' rows are the same."""
    with database.engine.begin() as connection:
        connection.execute(text("ALTER TABLE ledger_accounts ADD COLUMN system BOOLEAN NOT NULL DEFAULT FALSE"))
        connection.execute(text("ALTER TABLE ledger_transfers ADD COLUMN owner_id VARCHAR(64)"))
    yield
    with database.engine.begin() as connection:
        connection.execute(text("ALTER TABLE ledger_transfers DROP COLUMN owner_id"))
        connection.execute(text("ALTER TABLE ledger_accounts DROP COLUMN system"))


def populate(database: Database) -> Population:
    population = Population()
    with ledger_columns_as_today(database), fault_columns_as_today(database):
        for tenant_id in TENANTS:
            tenant_with_a_credit(database, tenant_id)
            ledger_transfers(database, tenant_id)
            with work_columns_named_as_today(database):
                payments_and_refunds(database, tenant_id)
            payouts_in_every_status(database, tenant_id, population)
    return population


@pytest.fixture
def populated(empty_database: Database) -> tuple[Database, Population]:
    migrate.upgrade(empty_database, BEFORE)
    population = populate(empty_database)
    stored = stored_statuses(empty_database)
    assert set(stored) == (set(states.STATUSES) - {states.SETTLED}) | {"settled"}, stored
    assert stored["settled"] == len(TENANTS) * SETTLED_PER_TENANT
    return empty_database, population


# --------------------------------------------------------------------------- what is compared


def snapshot(database: Database) -> Snapshot:
    """Every row of every table, all columns, ordered by primary key."""
    with database.read() as connection:
        inspector = inspect(connection)
        tables = sorted(set(inspector.get_table_names()) - {"alembic_version"})
        found: Snapshot = {}
        for table in tables:
            key = inspector.get_pk_constraint(table)["constrained_columns"]
            assert key, f"{table} has no primary key to order its rows by"
            query = text(f"SELECT * FROM {table} ORDER BY {', '.join(key)}")
            found[table] = [dict(row._mapping) for row in connection.execute(query)]
    return found


LEDGER_SUMS = text(
    """
    SELECT a.tenant_id, a.id,
           a.debits_posted_minor, a.credits_posted_minor, a.debits_pending_minor, a.credits_pending_minor,
           (SELECT COALESCE(SUM(e.amount_minor), 0) FROM ledger_entries e
              JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id
             WHERE e.tenant_id = a.tenant_id AND e.account_id = a.id AND e.direction = 'debit'
               AND t.kind IN ('transfer', 'post')) AS entries_debits_posted,
           (SELECT COALESCE(SUM(e.amount_minor), 0) FROM ledger_entries e
              JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id
             WHERE e.tenant_id = a.tenant_id AND e.account_id = a.id AND e.direction = 'credit'
               AND t.kind IN ('transfer', 'post')) AS entries_credits_posted,
           (SELECT COALESCE(SUM(e.amount_minor), 0) FROM ledger_entries e
              JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id
             WHERE e.tenant_id = a.tenant_id AND e.account_id = a.id AND e.direction = 'debit' AND t.kind = 'pending'
               AND NOT EXISTS (SELECT 1 FROM ledger_transfers r
                                WHERE r.tenant_id = t.tenant_id AND r.pending_id = t.id)) AS entries_debits_pending,
           (SELECT COALESCE(SUM(e.amount_minor), 0) FROM ledger_entries e
              JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id
             WHERE e.tenant_id = a.tenant_id AND e.account_id = a.id AND e.direction = 'credit' AND t.kind = 'pending'
               AND NOT EXISTS (SELECT 1 FROM ledger_transfers r
                                WHERE r.tenant_id = t.tenant_id AND r.pending_id = t.id)) AS entries_credits_pending
    FROM ledger_accounts a
    ORDER BY a.tenant_id, a.id
    """
)


def ledger_sums(database: Database) -> list[tuple[Any, ...]]:
    """Per account: the cached totals and the totals summed from the entries (integers: a
    PostgreSQL SUM of BIGINT is a NUMERIC)."""
    with database.read() as connection:
        rows = connection.execute(LEDGER_SUMS).all()
    sums = [(row[0], row[1], *(int(value) for value in row[2:])) for row in rows]
    assert all(row[2:6] == row[6:10] for row in sums), "cached totals differ from the entries"
    assert any(row[4] or row[5] for row in sums), "the fixture holds some money pending"
    return sums


def books_ok(database: Database) -> None:
    with database.read() as connection:
        report = verify(connection)
    assert report.ok, report.problems
    assert report.transfers > 0


def public_view(database: Database) -> dict[str, Any]:
    """What the API shows: every payout's JSON with its history, `?status=settled` per
    tenant, and the /metrics gauge's counts by public name."""
    with fault_columns_as_today(database), database.read() as connection:
        rows = connection.execute(select(payouts_table).order_by(payouts_table.c.tenant_id, payouts_table.c.id))
        found = [payout_from_row(row) for row in rows]
        bodies = {p.id: schemas.payout_json(p, service.history(connection, p)) for p in found}
        settled = {
            tenant_id: [
                p.id
                for p in service.page(
                    connection, tenant_id, status=states.stored("settled"), starting_after=None, limit=100
                )
            ]
            for tenant_id in TENANTS
        }
        counts = {states.public(name): total for name, total in repository.count_by_status(connection).items()}
    assert {body["status"] for body in bodies.values()} == {states.public(s) for s in states.STATUSES}
    return {"payouts": bodies, "settled": settled, "counts": counts}


def stored_statuses(database: Database) -> dict[str, int]:
    with database.read() as connection:
        rows = connection.execute(text("SELECT status, COUNT(*) FROM payouts GROUP BY status"))
        return {status: int(total) for status, total in rows}


def schema_shape(database: Database) -> dict[str, Any]:
    """Columns, keys, indexes and CHECK constraints of every table: a table copy on SQLite
    must keep all of them."""
    with database.read() as connection:
        inspector = inspect(connection)
        return {
            table: {
                "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
                "primary_key": inspector.get_pk_constraint(table)["constrained_columns"],
                "indexes": sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)),
                "unique": sorted(
                    (u["name"], tuple(u["column_names"])) for u in inspector.get_unique_constraints(table)
                ),
                "checks": {c["name"]: c["sqltext"] for c in inspector.get_check_constraints(table)},
            }
            for table in sorted(set(inspector.get_table_names()) - {"alembic_version"})
        }


def assert_only_settled_renamed(before: Snapshot, after: Snapshot, settled_ids: set[str]) -> None:
    assert set(after) == set(before)
    for table in before:
        if table != "payouts":
            assert after[table] == before[table], table
    expected = [{**row, "status": "succeeded"} if row["status"] == "settled" else row for row in before["payouts"]]
    assert after["payouts"] == expected
    renamed = {row["id"] for row in before["payouts"] if row["status"] == "settled"}
    assert renamed == settled_ids


# ------------------------------------------------------------------------------------- tests


def test_the_chain_changes_nothing_but_the_stored_word(populated: tuple[Database, Population]) -> None:
    database, population = populated
    before, sums, view, shape = snapshot(database), ledger_sums(database), public_view(database), schema_shape(database)
    books_ok(database)
    assert sorted(view["settled"]["acme"] + view["settled"]["zeta"]) == sorted(population.settled_ids)

    migrate.upgrade(database, EXPAND)  # the constraint widens; not one row changes
    assert snapshot(database) == before
    assert public_view(database) == view

    backfill(database)
    after = snapshot(database)
    assert_only_settled_renamed(before, after, population.settled_ids)
    assert stored_statuses(database).get("settled") is None

    migrate.upgrade(database, CONTRACT)  # the contract, the chain's last step
    assert migrate.current_revision(database) == CONTRACT
    assert snapshot(database) == after
    assert ledger_sums(database) == sums
    books_ok(database)
    assert public_view(database) == view

    shape_after = schema_shape(database)  # one CHECK changed; every column, key and index kept
    original = shape["payouts"]["checks"].pop("ck_payouts_status")
    assert "'settled'" in original and "'succeeded'" not in original
    contracted = shape_after["payouts"]["checks"].pop("ck_payouts_status")
    assert "'succeeded'" in contracted and "'settled'" not in contracted
    assert shape_after == shape


def test_the_contracted_database_refuses_settled(populated: tuple[Database, Population]) -> None:
    database, population = populated
    migrate.upgrade(database)
    settled_id = sorted(population.settled_ids)[0]
    with database.read() as connection:
        row = dict(connection.execute(select(payouts_table).where(payouts_table.c.id == settled_id)).one()._mapping)
    assert row["status"] == "succeeded"
    for statement, values in (
        (text("UPDATE payouts SET status = 'settled' WHERE id = :id"), {"id": settled_id}),
        (insert(payouts_table), {**row, "id": "po_copy", "idempotency_key": None, "status": "settled"}),
    ):
        with pytest.raises(IntegrityError), database.engine.connect() as connection, connection.begin():
            connection.execute(statement, values)
    for status in states.STATUSES:  # and admits every status the code stores
        with database.engine.connect() as connection:
            transaction = connection.begin()
            connection.execute(
                insert(payouts_table), {**row, "id": "po_copy", "idempotency_key": None, "status": status}
            )
            transaction.rollback()
    assert stored_statuses(database).get("settled") is None


def test_a_downgrade_to_0004_restores_settled(populated: tuple[Database, Population]) -> None:
    database, population = populated
    before, sums, view = snapshot(database), ledger_sums(database), public_view(database)
    migrate.upgrade(database)
    assert stored_statuses(database)["succeeded"] == len(population.settled_ids)

    alembic(database, command.downgrade, BEFORE)
    assert migrate.current_revision(database) == BEFORE
    assert snapshot(database) == before
    assert ledger_sums(database) == sums
    assert public_view(database) == view
    books_ok(database)
    with pytest.raises(IntegrityError), database.engine.connect() as connection, connection.begin():
        connection.execute(text("UPDATE payouts SET status = 'succeeded' WHERE status = 'settled'"))

    migrate.upgrade(database)  # and up again
    assert stored_statuses(database)["succeeded"] == len(population.settled_ids)


def test_code_at_head_moves_a_legacy_settled_row_exactly_once(empty_database: Database) -> None:
    database = empty_database
    migrate.upgrade(database, EXPAND)  # today's code runs here; an older process still writes `settled`
    with ledger_columns_as_today(database), fault_columns_as_today(database):  # the code at head, on 0005's schema
        source = support.funded_source(database, "acme", 10_000)
        payout = support.move(
            database, support.schedule(database, "acme", source, 1_000), *support.PATH_TO[states.SENT]
        )
        settle_as_0004_code(database, payout)
        assert stored_statuses(database)["settled"] == 1

        with database.read() as connection:
            legacy = service.MACHINE.load(connection, "acme", payout.id)  # read as the name the code writes
            assert legacy.status == states.SETTLED == "succeeded"
            assert schemas.payout_json(legacy)["status"] == "settled"
            assert [
                p.id for p in service.page(connection, "acme", status=states.SETTLED, starting_after=None, limit=10)
            ] == [payout.id]
            assert repository.count_by_status(connection)[states.SETTLED] == 1

        def return_it(connection: Connection) -> bool:  # each caller holds the same, now stale, view
            return lifecycle.MACHINE.move(
                connection, legacy, states.RETURNED, cause="bank_returned", actor="processor", now_us=now_us()
            ).changed

        assert [database.transaction(return_it) for _ in range(3)] == [True, False, False]
        assert stored_statuses(database) == {"returned": 1}
        with database.read() as connection:
            events = connection.execute(
                text("SELECT type, from_state, to_state FROM events WHERE object_id = :id AND to_state = 'returned'"),
                {"id": payout.id},
            ).all()
        assert [tuple(event) for event in events] == [("payout.returned", "settled", "returned")]

    migrate.upgrade(database)
    assert stored_statuses(database) == {"returned": 1}
    books_ok(database)


def test_the_contract_refuses_to_run_while_a_settled_row_remains(populated: tuple[Database, Population]) -> None:
    database, population = populated
    migrate.upgrade(database, EXPAND)
    backfill(database)
    straggler = sorted(population.settled_ids)[0]  # written by a process still running 0004's code
    with database.engine.connect() as connection, connection.begin():
        connection.execute(text("UPDATE payouts SET status = 'settled' WHERE id = :id"), {"id": straggler})

    with pytest.raises(RuntimeError, match="still have status 'settled'"):
        migrate.upgrade(database)
    assert migrate.current_revision(database) == BACKFILL
    assert stored_statuses(database)["settled"] == 1

    with database.engine.connect() as connection, connection.begin():  # the runbook's fix
        connection.execute(text("UPDATE payouts SET status = 'succeeded' WHERE status = 'settled'"))
    migrate.upgrade(database, CONTRACT)
    assert migrate.current_revision(database) == CONTRACT


def test_the_declared_constraint_admits_exactly_the_stored_statuses() -> None:
    (check,) = (c for c in payouts_table.constraints if c.name == "ck_payouts_status")
    declared = str(check.sqltext)  # type: ignore[attr-defined]
    listed = declared.removeprefix("status IN (").removesuffix(")").split(", ")
    assert sorted(name.strip("'") for name in listed) == sorted(states.STATUSES)
    assert set(states.LEGACY_NAMES).isdisjoint(states.STATUSES)
    assert all(states.stored(states.public(status)) == status for status in states.STATUSES)
    assert states.public(states.SETTLED) == "settled" and states.stored("settled") == "succeeded"
    assert states.normalize("settled") == states.SETTLED
    assert set(states.spellings([states.SETTLED, states.SENT])) == {"succeeded", "settled", "sent"}
