"""Keyed batches across processes (ADR 0026; `ledger.batch_keyed`, migration 0050): processes
sending one key at once, then their own keys, batches out of one hot `no_overdraft` wallet, half
through the data plane (the one call on PostgreSQL, the fixed list on SQLite) and half through
the reference path. The shared key's batch is made once and answered alike everywhere (the
others wait for it and replay it); every key's batch is made once; the wallet is spent to zero,
never below."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from tests.integration.ledger.test_batch_data_plane import Batch, builder, create, scope
from tests.support.ledger_books import (
    NOW_US,
    assert_shared_key_made_once,
    assert_wallet_spent,
    open_books,
    race,
)

RACERS = 4
BATCHES_EACH = 15
TRANSFERS_PER_BATCH = 2
AMOUNT_MINOR = 10
FUNDED_MINOR = 1_000  # room for 50 of the 61 batches
BATCH: Batch = [([("wallet", "debit", AMOUNT_MINOR), ("merchant", "credit", AMOUNT_MINOR)], {})] * TRANSFERS_PER_BATCH


def _race(url: str, books: dict[str, str], index: int, barrier: Any, results: Any) -> None:
    """One process: the shared key once (all processes at the same moment), then its own keys."""
    database = Database(Settings(database_url=url, db_pool_size=2))
    answers = []
    try:
        barrier.wait(timeout=60)
        for key in ["shared", *(f"p{index}-{number}" for number in range(BATCHES_EACH))]:
            outcome, replayed = create(
                database, scope("hot", key, BATCH, NOW_US), builder(books, BATCH), one_call=index % 2 == 0
            )
            answers.append((key, outcome.status, outcome.body, replayed))
        results.put(answers)
    finally:
        database.dispose()


def test_processes_racing_with_one_key_and_one_hot_account(database: Database, settings: Settings) -> None:
    books = open_books(database, "hot", wallet_minor=FUNDED_MINOR)
    answers = race(settings.database_url, _race, (books,), RACERS)
    made = {key: json.loads(body)["id"] for key, status, body, replayed in answers if status == 201 and not replayed}
    refused = [key for key, status, _, replayed in answers if status == 422 and not replayed]
    assert len(made) == FUNDED_MINOR // (AMOUNT_MINOR * TRANSFERS_PER_BATCH), len(made)
    assert len(made) + len(refused) + RACERS - 1 == len(answers) == RACERS * (BATCHES_EACH + 1)
    assert_shared_key_made_once(answers)
    assert_wallet_spent(database, "hot", books["wallet"])
    with database.read() as connection:
        per_batch = connection.execute(
            text(
                "SELECT batch_id, count(*) FROM ledger_transfers WHERE tenant_id = 'hot' AND batch_id IS NOT NULL"
                " GROUP BY batch_id"
            )
        ).all()
        stored = connection.execute(
            text("SELECT response_body FROM idempotency_keys WHERE tenant_id = 'hot' AND response_status = 201")
        ).all()
    assert sorted(batch_id for batch_id, _ in per_batch) == sorted(made.values())  # each key's batch once
    assert {count for _, count in per_batch} == {TRANSFERS_PER_BATCH}
    assert sorted(json.loads(body)["id"] for (body,) in stored) == sorted(made.values())
