"""A credit on the data plane (ADR 0026, issue 39): what it costs in SQL, counted (never timed)
on each database, and that its answer, built from the plan and never read back, is what the
books say after. Counted as tests/integration/payments/test_statement_counts.py counts: every
statement the driver runs (a SQLite group's BEGIN IMMEDIATE included) and every commit, here
around the credit's write alone (`create.create_credit`, below the HTTP edge and its
authentication). `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.

Before the data plane (the reference path, main at 9fb27fe, counted the same way): 9 statements
(BEGIN IMMEDIATE, the claim, the accounts' read, the transfer, two totals, the entries, the
credit, the key's answer) and 1 commit on SQLite; the same 8 without BEGIN and 1 commit on
PostgreSQL, each through a transaction of the client's.
"""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.credits import create, plan
from paycore.credits.plan import CreditLine
from paycore.db.engine import Database
from paycore.http.errors import dumps
from paycore.http.errors import render_refusal as refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.invariants import service as invariants
from paycore.ledger import service as ledger
from tests.support.rows import row_counts
from tests.support.statements import counting

PATH = "/v1/tenants/acme/credits"
USD = frozenset({"USD"})
# A credit to accounts this process has written to: the whole round trip, per database.
# PostgreSQL: the one call (autocommit: no BEGIN, no COMMIT of the client's). SQLite: BEGIN
# IMMEDIATE, the key with its answer, the two accounts' totals, the transfer, its entries, the
# credit (ADR 0026's fixed list), and the group's commit.
STATEMENTS = {"sqlite": 7, "postgresql": 1}
COMMITS = {"sqlite": 1, "postgresql": 0}


def scope(tenant_id: str, key: str, fingerprint: str = "f" * 64) -> idempotency.KeyScope:
    return idempotency.KeyScope(tenant_id, key, fingerprint, now_us=1_700_000_000_000_000, expires_at_us=None)


def render(credit: plan.Credit) -> str:
    return dumps({"id": credit.id, "amount_minor": credit.amount_minor, "transfer_id": credit.transfer_id})


def write(database: Database, key_scope: idempotency.KeyScope, amount_minor: int) -> tuple[idempotency.Outcome, bool]:
    lines = (CreditLine("bonus", amount_minor, "USD"),)

    async def run() -> tuple[idempotency.Outcome, bool]:
        return await create.create_credit(
            database,
            key_scope,
            lines,
            enabled_currencies=USD,
            lines_max=10,
            render=render,
            render_refusal=refusal,
        )

    return asyncio.run(run())


def test_a_credit_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    write(database, scope("count", "first"), 5)  # creates the accounts, and this process learns them
    with counting(database) as statements:
        outcome, replayed = write(database, scope("count", "second"), 7)
    assert (outcome.status, replayed) == (201, False)
    commits = statements.count("COMMIT")
    run = [sql for sql in statements if sql != "COMMIT"]
    dialect = database.engine.dialect.name
    assert (len(run), commits) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[0].startswith("SELECT paycore_credits_create("), run
    with database.read() as connection:
        balance = ledger.find_account_by_code(connection, "count", plan.balance_code("USD"))
    assert balance is not None and balance.balance.posted_minor == 12


def test_the_answer_is_what_the_books_say_after(client: TestClient, database: Database) -> None:
    lines = [
        {"desc": "a", "amount_minor": 100, "currency": "USD"},
        {"desc": "b", "amount_minor": 23, "currency": "USD"},
    ]
    for key, expected_balance in (("one", 123), ("two", 246)):
        answer = client.post(PATH, json={"idempotency_key": key, "lines": lines})
        assert answer.status_code == 201, answer.text
        body = answer.json()
        assert client.get("/v1/tenants/acme/balance").json() == {"currency": "USD", "amount_minor": expected_balance}
        with database.read() as connection:
            row = connection.execute(
                text(
                    "SELECT id, amount_minor, currency, lines, transfer_id, created_at_us FROM credits WHERE id = :id"
                ),
                {"id": body["id"]},
            ).one()
            transfer = ledger.get_transfer(connection, "acme", row.transfer_id)
            stored = connection.execute(
                text(
                    "SELECT response_status, response_body FROM idempotency_keys WHERE tenant_id = 'acme' AND key = :k"
                ),
                {"k": key},
            ).one()
        assert (row.amount_minor, row.currency) == (body["amount_minor"], body["currency"]) == (123, "USD")
        assert [(e.direction, e.amount_minor) for e in transfer.entries] == [("debit", 123), ("credit", 123)]
        assert (transfer.owner_id, transfer.reference_type, transfer.reference_id) == (body["id"], "credit", body["id"])
        assert (stored.response_status, stored.response_body) == (201, answer.text)
        replay = client.post(PATH, json={"idempotency_key": key, "lines": lines})
        assert (replay.status_code, replay.text) == (200, answer.text)
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []  # credit_books_state among them


def test_a_key_race_writes_one_credit(database: Database) -> None:
    """Both writes claim one key: the second finds it and replays the first's answer."""
    first, replayed_first = write(database, scope("race", "k"), 9)
    second, replayed_second = write(database, scope("race", "k"), 9)
    assert (replayed_first, replayed_second) == (False, True)
    assert second == first
    counts = row_counts(database)
    assert (counts["credits"], counts["ledger_transfers"], counts["ledger_entries"]) == (1, 1, 2)


def test_a_key_with_another_body_is_refused_as_before(database: Database) -> None:
    write(database, scope("reuse", "k", "a" * 64), 9)
    with pytest.raises(IdempotencyKeyReused):
        write(database, scope("reuse", "k", "b" * 64), 9)


def test_a_stale_cached_account_falls_back_and_is_forgotten(database: Database) -> None:
    """An id cached from another database moves nothing: the reference path writes the credit."""
    ledger.system_account_ids(database).put(
        "stale", {plan.balance_code("USD"): "acct_x", plan.issued_code("USD"): "acct_y"}
    )
    outcome, _ = write(database, scope("stale", "k"), 3)
    assert outcome.status == 201
    if not database.is_postgres:  # PostgreSQL's call never reads the cache: it ensures the accounts itself
        assert ledger.system_account_ids(database).get("stale", plan.balance_code("USD")) is None
    with database.read() as connection:
        assert ledger.verify(connection).problems == []
