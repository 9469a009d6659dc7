#!/usr/bin/env python3
"""A payout's creation alone (`POST /v1/payouts` below HTTP: one phase, the bank is called
later): the data plane against the reference path, in one process, on one database, alternated
in rounds (ADR 0026 step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/payouts_create_bench.py --backend sqlite --rounds 7 --count 1000

`reference`: what the route runs today, in `idempotency.run` (SQLAlchemy Core): the key's
claim, `payouts.service.schedule`, the `api_call` event, the history's read and the key's
answer. `data plane`: `payouts.create.create` (the planner, then one call of
`paycore_payouts_create` on PostgreSQL or the fixed list on SQLite). Each round runs --count
payouts of each, out of one tenant's one funded source, each with a fresh key.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

import _phase as phase
from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payouts import create, create_plan, schemas, service
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary

ACTOR = "local"
ACH = Beneficiary("Ada Lovelace", routing_number="110000000", account_number="000123456789")
FUNDED_MINOR = 9_000_000_000_000_000  # never short: every payout of the bench fits


def never() -> Outcome:
    raise AssertionError("the data plane handed a bench payout to the reference path")


def funded_source(connection: Connection) -> str:
    source, funding = (
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
        for code, normal in (("seller.main", "credit"), ("funding.main", "debit"))
    )
    entries = (EntrySpec(funding.id, "debit", FUNDED_MINOR), EntrySpec(source.id, "credit", FUNDED_MINOR))
    ledger.create_transfer(connection, phase.TENANT, TransferSpec(entries=entries), now_us=now_us())
    return source.id


def setup(database: Database) -> dict[str, phase.Write]:
    source = database.transaction(funded_source)

    def new(scope: KeyScope) -> NewPayout:
        return NewPayout(1_000, "USD", source, "ach", ACH, metadata={"invoice": "1"}, idempotency_key=scope.key)

    def reference(scope: KeyScope) -> Any:
        payout_request = new(scope)

        def effect(connection: Connection) -> Outcome:  # the route's (routers/payouts.py)
            payout = service.schedule(connection, scope.tenant_id, payout_request, now_us=scope.now_us, actor=ACTOR)
            audit.record_api_call(
                connection,
                scope.tenant_id,
                object_type="payout",
                object_id=payout.id,
                operation=create_plan.OPERATION,
                status=201,
                outcome="accepted",
                actor=ACTOR,
                now_us=scope.now_us,
                data={"idempotency_key": scope.key},
            )
            return Outcome(201, dumps(schemas.payout_json(payout, service.history(connection, payout))))

        outcome, _ = idempotency.run(database, scope, effect, render_refusal)
        assert outcome.status == 201, outcome

    def data_plane(scope: KeyScope) -> Any:
        answer = create.create(database, scope, new(scope), actor=ACTOR, encode=dumps, reference=never)
        assert answer.status == 201, answer

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("payouts_create", "payout", setup), __doc__)
