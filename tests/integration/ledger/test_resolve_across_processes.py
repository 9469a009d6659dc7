"""A hold's post and its void raced across processes (ADR 0026): processes posting and voiding
the same holds, half through the data plane (`resolve_keyed.answer`: the one call on PostgreSQL,
the fixed list on SQLite), half through the reference path, each with its own keys. Each hold is
resolved exactly once (one answer 200, every other one `transfer_not_pending`), its money moved
once, and the books verify."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.ledger import resolve_keyed
from paycore.ledger import service as ledger
from tests.integration.ledger.test_resolve_data_plane import HOLD, Request, transfer
from tests.support.ledger_books import NOW_US, open_books, race

# Racers 0 and 1 on the data plane from the first hold, 2 and 3 on the reference path from the
# last: each pair goes at one speed, on the same hold at the same time. Each racer posts the holds
# of its parity and voids the others, so that a pair sends each hold a post and a void.
RACERS = 4
HOLDS = 24
HELD_MINOR = 200  # each hold's, from the wallet to the merchant


def _race(url: str, holds: list[str], index: int, barrier: Any, results: Any) -> None:
    """One process: every hold, in its own order, posted or voided."""
    database = Database(Settings(database_url=url, db_pool_size=2))
    order = list(enumerate(holds))
    order = order if index < 2 else order[::-1]
    answers = []
    try:
        barrier.wait(timeout=60)
        for number, hold in order:
            kind = "post" if (index + number) % 2 == 0 else "void"
            request = Request(kind, hold, f"racer{index}-{number}", NOW_US + 10_000 + number, "race")
            outcome, replayed = resolve_keyed.answer(
                database, request.scope, request.operation, render_refusal, one_call=index < 2
            )
            error = None if outcome.status == 200 else json.loads(outcome.body)["error"]
            answers.append((hold, kind, outcome.status, error, replayed))
        results.put(answers)
    finally:
        database.dispose()


def test_a_post_and_a_void_raced_resolve_each_hold_once(database: Database, settings: Settings) -> None:
    books = open_books(database, "race", wallet_minor=HOLDS * HELD_MINOR)
    holds = [transfer(database, "race", books, HOLD, NOW_US + number, pending=True) for number in range(HOLDS)]
    answers = race(settings.database_url, _race, (holds,), RACERS)
    assert len(answers) == RACERS * HOLDS and not any(replayed for *_, replayed in answers)
    won = {hold: [kind for found, kind, status, _, _ in answers if found == hold and status == 200] for hold in holds}
    assert all(len(kinds) == 1 for kinds in won.values()), won
    assert {error for *_, status, error, _ in answers if status != 200} == {"transfer_not_pending"}
    posted = sum(kinds == ["post"] for kinds in won.values())
    assert 0 < posted < HOLDS, posted  # both raced for real: a post won some holds, a void others
    with database.read() as connection:
        wallet = ledger.get_account(connection, "race", books["wallet"])
        merchant = ledger.get_account(connection, "race", books["merchant"])
        assert ledger.verify(connection).problems == []
        per_hold = connection.execute(
            text(
                "SELECT pending_id, count(*) FROM ledger_transfers WHERE tenant_id = 'race'"
                " AND pending_id IS NOT NULL GROUP BY pending_id"
            )
        ).all()
    assert sorted(hold for hold, _ in per_hold) == sorted(holds) and {count for _, count in per_hold} == {1}
    assert (wallet.balance.pending_minor, merchant.balance.pending_minor) == (0, 0)
    assert merchant.balance.posted_minor == posted * HELD_MINOR
    assert wallet.balance.posted_minor == (HOLDS - posted) * HELD_MINOR
