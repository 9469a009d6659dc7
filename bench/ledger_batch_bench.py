#!/usr/bin/env python3
"""A keyed batch of ledger transfers alone (`POST /v1/transfers/batch` below HTTP): the data
plane against the reference path, in one process, on one database, alternated in rounds (ADR
0026, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/ledger_batch_bench.py --backend postgres --rounds 7 --count 100

`reference`: `batch_keyed.create_batch(..., one_call=False)`, `idempotency.run` around
`ledger.service.create_batch` (what every keyed batch ran before its data plane: the key's
claim, one call of `paycore_create_batch`, the key's answer and a COMMIT on PostgreSQL).
`data plane`: `batch.plan_batch` and the answer cut at its sequence numbers, then the one call
of migration 0050's `paycore_create_batch` (the key claimed and answered inside it) on
PostgreSQL, or the fixed list of `ledger/batch_keyed.py` on SQLite, as `batch_keyed.create_batch`
runs them. Each batch holds BATCH_TRANSFERS transfers of 1 minor unit between two accounts of
one tenant (the same two every time: their facts cached), with a fresh key, and renders the
answer as the route does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import _phase as phase
from ledger_transfer_bench import accounts
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency.service import KeyScope
from paycore.ledger import batch_keyed, schemas
from paycore.ledger import service as ledger

BATCH_TRANSFERS = 100  # the API's default bound (`batch_transfers_max`)


def render(batch_id: str, created: Sequence[ledger.Transfer]) -> str:
    return dumps({"object": "batch", "id": batch_id, "transfers": [schemas.transfer_json(t) for t in created]})


def setup(database: Database) -> dict[str, phase.Write]:
    cash, merchant = accounts(database)
    spec = ledger.TransferSpec(
        (ledger.EntrySpec(cash, "debit", 1), ledger.EntrySpec(merchant, "credit", 1)), currency="USD"
    )
    specs = [spec] * BATCH_TRANSFERS

    def build(_now_us: int) -> list[ledger.TransferSpec]:
        return specs

    def reference(scope: KeyScope) -> Any:
        outcome, replayed = batch_keyed.create_batch(database, scope, build, render, render_refusal, one_call=False)
        assert outcome.status == 201 and not replayed, outcome

    def data_plane(scope: KeyScope) -> Any:
        write = batch_keyed.create_in_one_call if database.is_postgres else batch_keyed.create_in_statements
        outcome = write(database, scope, build, render)
        assert outcome is not None and outcome.status == 201, outcome  # never the reference path

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("ledger_batch", "batch", setup), __doc__)
