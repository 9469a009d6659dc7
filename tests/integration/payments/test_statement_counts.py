"""What one payment, one refund and one payout cost in SQL, counted (never timed) on each
database, so the count can only go down (issue 19) unless a design pays for something with a
statement, said beside its bound.

Counted on paycore's own engine (the sandbox keeps its own database): every statement the
driver executes (`paycore.db.observers`, so a `Database.transaction`'s BEGIN IMMEDIATE on
SQLite counts too) and every commit. Each flow is what a user runs: the HTTP API for the
requests (authentication, idempotency key, the write, the response), the worker's jobs for the
calls, the sandbox's webhooks delivered to paycore. `PAYCORE_PRINT_STATEMENTS=1` prints each
statement (pytest -s) to see where the count comes from.

The bounds are the counts measured when the test was written (after the one lifecycle); the
code before it (be5a699), counted the same way: payment 34 and 32, refund 41 and 38, payout 64
and 60 statements (SQLite and PostgreSQL), the same commits (docs/benchmarks.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event

from paycore.db import observers
from paycore.kit.clock import now_us
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.integration.refunds import support as refunds
from tests.support.payouts import funded_source

PRINT = os.environ.get("PAYCORE_PRINT_STATEMENTS") == "1"

# (statements, commits) at most, per backend and flow.
# Each one lower by a statement since a hold is read back with its entries in one (issue 31).
# A payment's accept on the data plane (ADR 0026 step 3): on PostgreSQL one call in autocommit
# (11 statements and a commit before: 27 and 4); on SQLite the fixed list, here with the
# clearing account's read and creation, as this is the tenant's first payment (29 before).
# Its settle phase on the data plane too: on PostgreSQL one call in autocommit (12 statements
# and a commit before: 18 and 3); on SQLite BEGIN IMMEDIATE and the fixed list of 8 (13 before).
# The processor's webhook too (its payment settled already: `stale`): on PostgreSQL one call in
# autocommit (4 statements and a commit before: 7 and 2); on SQLite BEGIN IMMEDIATE and 2 (and 4).
# An authorization and its capture (ADR 0029; `test_one_authorized_and_captured_payment`): its
# accept, its settle to `requires_capture` and its capture's begin and finish on the data plane
# (before, the reference path for all: 47 and 43 statements, 6 and 8 commits; with the
# authorization's two phases alone on the data plane: 44 and 29, 6 and 6).
# A payment the processor answered `pending`, moved by its webhook
# (`test_one_pending_payment_settled_by_its_webhook`): the webhook's apply phase on the data plane
# (`inbound/apply_payment.py`): one call on PostgreSQL (the function reads the payment itself, migration
# 0046: a statement less than the read and the call before it, 14), BEGIN IMMEDIATE, the read and
# 8 on SQLite (before, the reference path's apply: 39 and 26 statements, 4 and 4 commits).
# Claims tenant by tenant (ADR 0033, for Citus and for fairness between tenants) read first which
# tenants have due work: one statement more in each claiming round. A payout's flow has two (its
# queue and its send): 54 and 39 before. A refund's has one, which its webhook's data plane paid for.
BOUNDS: dict[tuple[str, str], tuple[int, int]] = {
    ("sqlite", "payment"): (22, 3),
    ("postgres", "payment"): (4, 1),
    ("sqlite", "refund"): (30, 4),
    ("postgres", "refund"): (20, 4),
    ("sqlite", "payout"): (56, 5),
    ("postgres", "payout"): (41, 5),
    ("sqlite", "authorization"): (39, 6),
    ("postgres", "authorization"): (15, 5),
    ("sqlite", "pending payment"): (33, 4),
    ("postgres", "pending payment"): (13, 3),
}
SETTLED_LATE_US = 600_000_000  # the sandbox's late settle (`tok_pending`) is due by then


@dataclass
class Count:
    statements: list[str] = field(default_factory=list)
    commits: int = 0


@contextmanager
def counting(env: Env) -> Iterator[Count]:
    count = Count()
    engine = env.database.engine

    def statement(sql: str, parameters: Any, executemany: bool) -> None:
        count.statements.append(" ".join(sql.split())[:160])

    def commit(conn: Any) -> None:
        count.commits += 1

    event.listen(engine, "commit", commit)
    try:
        with observers.observing(engine, statement):
            yield count
    finally:
        event.remove(engine, "commit", commit)
    if PRINT:
        print("\n".join(count.statements))


def check(env: Env, flow: str, count: Count) -> None:
    backend = env.database.engine.dialect.name
    backend = "postgres" if backend == "postgresql" else backend
    statements_max, commits_max = BOUNDS[(backend, flow)]
    measured = f"{flow} on {backend}: {len(count.statements)} statements, {count.commits} commits"
    print(measured)
    assert len(count.statements) <= statements_max and count.commits <= commits_max, measured


# `http`: the processor over plain HTTP, so the payments' thin edge runs the payment from the
# event loop with no worker thread (`payments/create_on_loop.py`; on PostgreSQL the loop's own
# connections, `db/loop_calls.py`): the same statements, within the same bounds.
@pytest.mark.parametrize("transport", ["inprocess", "http"], indirect=True)
def test_one_succeeded_payment(env: Env) -> None:
    destination = env.account()
    with counting(env) as count:
        assert env.pay(destination).status_code == 201
        env.deliver()  # the sandbox's webhook: the payment is already succeeded, nothing moves
    check(env, "payment", count)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_one_succeeded_refund(env: Env) -> None:
    _, payment_id = refunds.paid(env)
    env.deliver()
    with counting(env) as count:
        refund = refunds.created(env, payment_id, 400)
        assert refunds.send(env) == 1
        env.deliver()
    assert refunds.status_of(env, refund["id"]) == "succeeded"
    check(env, "refund", count)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_one_settled_payout(env: Env) -> None:
    source = funded_source(env.database, payouts.TENANT, 10_000)
    with counting(env) as count:
        payout = payouts.schedule(env, payouts.ach(source))
        assert payouts.queue_and_send(env) == 1
        payouts.bank_finishes(env)
    assert payouts.get(env, payout["id"])["status"] == "settled"
    check(env, "payout", count)


@pytest.mark.parametrize("transport", ["inprocess", "http"], indirect=True)
def test_one_authorized_and_captured_payment(env: Env) -> None:
    """A manual payment (ADR 0029): authorized, its webhook, a partial capture, its webhook."""
    destination = env.account()
    with counting(env) as count:
        authorized = env.pay(destination, capture="manual")
        assert authorized.status_code == 201 and authorized.json()["status"] == "requires_capture"
        env.deliver()
        payment_id = authorized.json()["id"]
        captured = env.client.post(
            f"/v1/payments/{payment_id}/capture", json={"amount_minor": 600}, headers={"Idempotency-Key": "cap-1"}
        )
        assert captured.status_code == 200 and captured.json()["status"] == "succeeded", captured.text
        env.deliver()
    check(env, "authorization", count)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_one_pending_payment_settled_by_its_webhook(env: Env) -> None:
    """The processor answers `pending` (`tok_pending`) and settles the charge later: its webhook
    moves the payment (`inbound/apply_payment.py`)."""
    destination = env.account()
    with counting(env) as count:
        response = env.pay(destination, token="tok_pending")
        assert response.status_code == 202 and response.json()["status"] == "processing", response.text
        env.deliver()  # the sandbox's `pending`: nothing moves
        assert env.sandbox.settle_due(now_us() + SETTLED_LATE_US) == 1
        assert env.deliver(now_us() + SETTLED_LATE_US) == 1  # its `charge.succeeded`
    assert env.balance(destination)["posted_minor"] == response.json()["amount_minor"]
    check(env, "pending payment", count)
