#!/usr/bin/env python3
"""A refund's creating phase alone (`POST /v1/payments/{id}/refunds` below the HTTP edge): the
data plane against the reference path, in one process, on one database, alternated in rounds
(ADR 0026 step 3, issue 39; the rounds and measures: `_phase.py`).

    .venv/bin/python bench/refunds_create_bench.py --backend sqlite --rounds 7 --count 1000

`reference`: `refunds.create.reference` (`service.create_refund` inside `idempotency.run`,
SQLAlchemy Core: what the route runs today). `data plane`: `refunds.create.create_refund` (the
planner, then one call of `paycore_refunds_create` on PostgreSQL or the fixed list on SQLite),
which must never hand a bench refund to the reference path. Each round runs --count refunds of
1 minor unit of each path's own settled payment (10^12: the ceiling never refuses), with a
fresh key each, the tenant with an approval threshold (read by each write) that none reaches.
Measured per refund: this process's CPU (with PostgreSQL's backends') and the wall time.
Medians over rounds.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Connection

import _phase as phase
from paycore.audit.service import Event
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors, ids
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.refunds import create, schemas
from paycore.refunds.create_plan import RefundRequest
from paycore.refunds.types import Refund
from paycore.tenants import settings as tenant_settings

TENANT = phase.TENANT
_REFERENCE = create.reference
PAID_MINOR = 10**12  # each path's payment: far more than its refunds of 1, and both within the limits


def render(refund: Refund, history: list[Event]) -> str:
    return dumps(schemas.refund_json(refund, history))


def never(*args: object, **kwargs: object) -> tuple[Outcome, bool]:
    raise AssertionError("the data plane handed a bench refund to the reference path")


def settled(database: Database, code: str) -> str:
    """A settled payment of the tenant to its own merchant account: its id."""

    def work(connection: Connection) -> str:
        merchant = ledger.create_account(
            connection, TENANT, code=code, currency="USD", normal_balance="credit", no_overdraft=False,
            metadata={}, now_us=now_us(),
        ).id  # fmt: skip
        return payments.import_settled_payment(
            connection, TENANT, payment_id=ids.new_id("pay"), amount_minor=PAID_MINOR, currency="USD",
            destination_account_id=merchant, now_us=now_us(),
        ).id  # fmt: skip

    return database.transaction(work)


def setup(database: Database) -> dict[str, phase.Write]:
    """The tenant with an approval threshold none reaches (read by each write), and each path's
    own settled payment; the data plane's fallback made to fail rather than be measured."""
    create.reference = never
    database.transaction(
        lambda connection: tenant_settings.set(
            connection,
            TENANT,
            lambda current: replace(current, refund_approval_threshold_minor=AMOUNT_MINOR_MAX),
            actor=actors.LOCAL,
            by_approver=True,
            now_us=now_us(),
        )
    )
    requests = {
        name: RefundRequest(settled(database, f"merchant.{index}"), 1, "bench", actors.LOCAL)
        for index, name in enumerate(phase.PATHS)
    }

    def reference(scope: KeyScope) -> None:
        outcome, replayed = _REFERENCE(
            database, scope, requests["reference"], render=render, render_refusal=render_refusal
        )
        assert outcome.status == 201 and not replayed

    def data_plane(scope: KeyScope) -> None:
        outcome, replayed = create.create_refund(
            database, scope, requests["data plane"], render=render, render_refusal=render_refusal
        )
        assert outcome.status == 201 and not replayed

    return {"reference": reference, "data plane": data_plane}


if __name__ == "__main__":
    phase.main(phase.Phase("refund_phase", "refund", setup), __doc__)
