"""Four eyes by sum (SPEC §7.1): a refund waits in `requires_approval` when the payment's refunds
that are not failed or canceled, this one included, add up to more than the tenant's threshold;
so splitting a refund into pieces never avoids a second person. On both databases.

- The reproduction, with the tenant's own API key: five refunds of 1,000 on a 5,000 payment
  (threshold 1,000) used to need no approval; now only the first (exactly the threshold) goes.
- Failed and canceled refunds no longer count; succeeded and waiting ones do.
- Two refunds racing on one payment from two `Database`s (their own connections and, on
  SQLite, their own writer lock, as two API processes): never both below the threshold when
  together they pass it. The same across OS processes: tests/e2e/test_refund_approval_processes.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import partial

import pytest
from sqlalchemy import select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.refunds import service as refunds
from paycore.refunds.models import refunds as refunds_table
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.refunds import support
from tests.integration.refunds.support import created, paid
from tests.support.refunds import assert_rule_zero, fail_refund, new_payment, open_merchant, run_together

TENANT = "by-sum"
ROUNDS = 60


@pytest.fixture
def transport() -> str:
    return "inprocess"


def with_key(env: Env) -> None:
    """The tenant `acme` and its API key: every request of env.client uses it from now on."""
    made = env.database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
    env.client.headers["Authorization"] = f"Bearer {made.api_key}"


def statuses(env: Env, payment_id: str, amounts: list[int]) -> list[str]:
    return [created(env, payment_id, amount)["status"] for amount in amounts]


def test_five_refunds_of_the_threshold_need_approval_after_the_first(env: Env) -> None:
    with_key(env)
    merchant, payment = paid(env, amount_minor=5000)
    put = env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 1000})
    assert put.status_code == 200, put.text
    assert statuses(env, payment, [1000] * 5) == ["pending"] + ["requires_approval"] * 4
    assert support.send(env) == 1  # only the first reaches the processor without a second person
    assert support.money(env, merchant) == (4000, -4000, 0)  # the waiting ones hold their amount


def test_failed_and_canceled_refunds_do_not_count_succeeded_and_waiting_ones_do(env: Env) -> None:
    _, payment = paid(env, amount_minor=5000)
    env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 1000})
    first = created(env, payment, 600)
    assert first["status"] == "pending"
    waiting = created(env, payment, 600)  # 1200
    assert waiting["status"] == "requires_approval"
    assert env.client.post(f"/v1/refunds/{waiting['id']}/cancel").json()["status"] == "canceled"
    assert fail_refund(env.database, tenants.DEFAULT_TENANT, first["id"])  # the processor's failure
    alone = created(env, payment, 1000)
    assert alone["status"] == "pending"  # the two 600s released: 1000 alone, not more than 1000
    assert support.send(env) == 1
    assert support.status_of(env, alone["id"]) == "succeeded"
    assert statuses(env, payment, [1]) == ["requires_approval"]  # the succeeded 1000 counts: 1001
    assert env.client.get(f"/v1/payments/{payment}").json()["refunded_minor"] == 1001


@pytest.fixture
def agents(settings: Settings) -> Iterator[list[Database]]:
    databases = [Database(settings) for _ in range(2)]
    yield databases
    for database in databases:
        database.dispose()


def _create(database: Database, payment_id: str, amount_minor: int, threshold_minor: int) -> str:
    new = refunds.NewRefund(payment_id=payment_id, amount_minor=amount_minor, approval_threshold_minor=threshold_minor)
    return database.transaction(
        lambda connection: refunds.create_refund(connection, TENANT, new, now_us=now_us(), actor="local").status
    )


def test_two_racing_refunds_never_both_escape_approval(database: Database, agents: list[Database]) -> None:
    merchant = open_merchant(database, TENANT)
    outcomes: Counter[tuple[str, ...]] = Counter()
    for _ in range(ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, 2000)
        works = [partial(_create, agent, payment_id, 600, 1000) for agent in agents]
        results = run_together(works)
        assert all(isinstance(result, str) for result in results), results
        outcomes[tuple(sorted(results))] += 1
    assert outcomes == Counter({("pending", "requires_approval"): ROUNDS}), outcomes
    with database.read() as connection:
        stored = Counter(connection.execute(select(refunds_table.c.status)).scalars())
    assert stored == Counter({"pending": ROUNDS, "requires_approval": ROUNDS})
    assert_rule_zero(database, TENANT)
