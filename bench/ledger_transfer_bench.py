#!/usr/bin/env python3
"""A ledger transfer alone (`POST /v1/transfers` below HTTP): the data plane against the
reference path, in one process, on one database, alternated in rounds (ADR 0026, issue 39;
the rounds and measures: `_phase.py`).

    .venv/bin/python bench/ledger_transfer_bench.py --backend sqlite --rounds 7 --count 1000

`reference`: `keyed.create_transfer(..., one_call=False)`, `idempotency.run` around
`ledger.service.create_transfer` (what every transfer ran on SQLite before its data plane).
`data plane`: the planner (`ledger/transfer_plan.py`), then the fixed list of
`ledger/transfer_repository.py` on SQLite or the one call of `paycore_create_transfer` on
PostgreSQL (ADR 0011), as `keyed.create_transfer` runs them. Each write moves 1 minor unit
between two accounts of one tenant (the same two every time: their facts cached), with a fresh
key, and renders the answer as the route does.
"""

from __future__ import annotations

from typing import Any

import _phase as phase
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency.service import KeyScope
from paycore.kit.clock import now_us
from paycore.ledger import keyed, schemas
from paycore.ledger import service as ledger


def render(transfer: ledger.Transfer) -> str:
    return dumps(schemas.transfer_json(transfer))


def accounts(database: Database) -> tuple[str, str]:
    def work(connection: Any) -> tuple[str, str]:
        made = [
            ledger.create_account(
                connection,
                phase.TENANT,
                code=code,
                currency="USD",
                normal_balance=normal,
                no_overdraft=False,
                metadata={},
                now_us=now_us(),
            )
            for code, normal in (("cash", "debit"), ("merchant", "credit"))
        ]
        return made[0].id, made[1].id

    return database.transaction(work)


def setup(database: Database) -> dict[str, phase.Write]:
    cash, merchant = accounts(database)
    spec = ledger.TransferSpec(
        (ledger.EntrySpec(cash, "debit", 1), ledger.EntrySpec(merchant, "credit", 1)), currency="USD"
    )

    def build(_now_us: int) -> ledger.TransferSpec:
        return spec

    def reference(scope: KeyScope) -> Any:
        outcome, replayed = keyed.create_transfer(database, scope, build, render, render_refusal, one_call=False)
        assert outcome.status == 201 and not replayed, outcome

    def data_plane(scope: KeyScope) -> Any:
        write = keyed.create_in_one_call if database.is_postgres else keyed.create_in_statements
        outcome = write(database, scope, build, render)
        assert outcome is not None and outcome.status == 201, outcome  # never the reference path

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("ledger_transfer", "transfer", setup), __doc__)
