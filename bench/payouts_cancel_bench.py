#!/usr/bin/env python3
"""A payout's cancel alone (`POST /v1/payouts/{id}/cancel` below HTTP): the data plane against
the reference path, in one process, on one database, alternated in rounds (ADR 0026 step 3,
issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/payouts_cancel_bench.py --backend sqlite --rounds 7 --count 1000

`reference`: what the route runs today, in `idempotency.run` (SQLAlchemy Core):
`payouts.service.cancel`, the history's read and the key's answer. `data plane`:
`payouts.cancel.cancel` (the two reads and the planner, then one call of
`paycore_payouts_cancel` on PostgreSQL or the fixed list on SQLite). Each write cancels a
payout scheduled before the rounds (through the data plane's creation, not measured), out of
one tenant's one funded source, with a fresh key.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection

import _phase as phase
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.clock import now_us
from paycore.payouts import cancel, create, schemas, service
from paycore.payouts.types import NewPayout
from payouts_create_bench import ACH, funded_source, never

ACTOR = "local"
RETENTION_US = 86_400_000_000
_pool_size = 0  # payouts to schedule before the rounds, by path: set from the arguments


def scheduled(database: Database, source: str, count: int) -> list[str]:
    ids = []
    for index in range(count):
        scope = KeyScope(phase.TENANT, f"p{index}-{now_us()}", "f" * 64, now_us=now_us(), expires_at_us=None)
        new = NewPayout(1_000, "USD", source, "ach", ACH, metadata={"invoice": "1"}, idempotency_key=scope.key)
        answer = create.create(database, scope, new, actor=ACTOR, encode=dumps, reference=never)
        ids.append(str(json.loads(answer.body)["id"]))
    return ids


def setup(database: Database) -> dict[str, phase.Write]:
    source = database.transaction(funded_source)
    pools = {path: scheduled(database, source, _pool_size) for path in phase.PATHS}

    def expiring(scope: KeyScope) -> KeyScope:
        return replace(scope, expires_at_us=scope.now_us + RETENTION_US)  # a cancel's key expires

    def reference(scope: KeyScope) -> Any:
        payout_id, scope = pools["reference"].pop(), expiring(scope)

        def effect(connection: Connection) -> Outcome:  # the route's (routers/payouts.py)
            payout = service.cancel(connection, scope.tenant_id, payout_id, now_us=scope.now_us, actor=ACTOR)
            return Outcome(200, dumps(schemas.payout_json(payout, service.history(connection, payout))))

        outcome, _ = idempotency.run(database, scope, effect, render_refusal)
        assert outcome.status == 200, outcome

    def data_plane(scope: KeyScope) -> Any:
        payout_id = pools["data plane"].pop()
        answer = cancel.cancel(database, expiring(scope), payout_id, actor=ACTOR, encode=dumps, reference=never)
        assert answer.status == 200, answer

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    sizing = argparse.ArgumentParser(add_help=False)
    sizing.add_argument("--rounds", type=int, default=7)
    sizing.add_argument("--count", type=int, default=1000)
    sized, _ = sizing.parse_known_args()
    _pool_size = sized.count // 4 + sized.rounds * sized.count  # the warm-up and every round
    phase.main(phase.Phase("payouts_cancel", "cancel", setup), __doc__)
