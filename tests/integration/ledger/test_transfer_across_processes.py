"""A ledger transfer across processes (ADR 0026, issue 39): processes racing on one hot
`no_overdraft` account, half through the data plane (`keyed.create_transfer`: the one call on
PostgreSQL, the fixed list on SQLite), half through the reference path, never overdraw it, and
make each key's transfer once; a key they all send is answered alike everywhere."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.ledger import keyed
from tests.integration.ledger.test_transfer_data_plane import body_of, builder, render, scope
from tests.support.ledger_books import (
    NOW_US,
    assert_shared_key_made_once,
    assert_wallet_spent,
    open_books,
    race,
)

RACERS = 4
TRANSFERS_EACH = 30
AMOUNT_MINOR = 10
FUNDED_MINOR = 1_000  # room for 100 of the 121 transfers


def _race(url: str, books: dict[str, str], index: int, barrier: Any, results: Any) -> None:
    """One process: the shared key once, then its own keys, each a transfer of AMOUNT_MINOR out
    of the hot wallet (half the processes through the data plane, half the reference path)."""
    database = Database(Settings(database_url=url, db_pool_size=2))
    legs = [("wallet", "debit", AMOUNT_MINOR), ("merchant", "credit", AMOUNT_MINOR)]
    body = body_of(legs, {})
    answers = []
    try:
        barrier.wait(timeout=60)
        for key in ["shared", *(f"p{index}-{number}" for number in range(TRANSFERS_EACH))]:
            key_scope = scope("hot", key, body, NOW_US)
            outcome, replayed = keyed.create_transfer(
                database, key_scope, builder(books, legs), render, render_refusal, one_call=index % 2 == 0
            )
            answers.append((key, outcome.status, outcome.body if key == "shared" else "", replayed))
        results.put(answers)
    finally:
        database.dispose()


def test_processes_racing_on_one_hot_account_never_overdraw_it(database: Database, settings: Settings) -> None:
    books = open_books(database, "hot", wallet_minor=FUNDED_MINOR)
    answers = race(settings.database_url, _race, (books,), RACERS)
    created = [key for key, status, _, replayed in answers if status == 201 and not replayed]
    refused = [key for key, status, _, replayed in answers if status == 422 and not replayed]
    assert len(created) == FUNDED_MINOR // AMOUNT_MINOR and len(created) == len(set(created)), len(created)
    assert len(created) + len(refused) + RACERS - 1 == len(answers) == RACERS * (TRANSFERS_EACH + 1)
    assert_shared_key_made_once(answers)
    assert_wallet_spent(database, "hot", books["wallet"])
    with database.read() as connection:
        per_key = connection.execute(
            text(
                "SELECT idempotency_key, count(*) FROM ledger_transfers WHERE tenant_id = 'hot'"
                " AND idempotency_key IS NOT NULL GROUP BY idempotency_key"
            )
        ).all()
    assert sorted(key for key, _ in per_key) == sorted(created) and {count for _, count in per_key} == {1}
