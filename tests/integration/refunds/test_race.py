"""Rule zero under concurrency (SPEC §7): refunds racing on one payment, from two threads with
a `Database` each (their own connections and transactions, and on SQLite their own writer
lock, as two API processes), round after round, each round on a fresh payment.

- Two refunds of random amounts: the outcome is the only one rule zero allows, whatever
  order the database picks: both stored if together they fit, else exactly one.
- A refund racing the failure of another refund of the same payment: the failure always
  lands, the new refund is stored whenever it fits (after the release, or anyway), and no
  transaction deadlocks.

After every test, for every payment: the refunds that hold their amount add up to at most
the payment and to exactly the payment's `refunded_minor`, and the ledger verifies.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import pytest

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.refunds.errors import OverRefund
from tests.support.refunds import (
    assert_rule_zero,
    create_refund,
    fail_refund,
    new_payment,
    open_merchant,
    run_together,
)

T = TypeVar("T")
TENANT = "race"
PAID_MINOR = 100
ROUNDS = 300
RELEASE_ROUNDS = 150


@pytest.fixture
def agents(settings: Settings) -> Iterator[list[Database]]:
    databases = [Database(settings) for _ in range(2)]
    yield databases
    for database in databases:
        database.dispose()


def outcome(result: object) -> str:
    if isinstance(result, OverRefund):
        return "refused"
    assert isinstance(result, str | bool), f"neither an answer nor a refusal: {result!r}"
    return "stored" if isinstance(result, str) else f"changed={result}"


def test_two_refunds_racing_on_one_payment_never_exceed_it(database: Database, agents: list[Database]) -> None:
    rng = random.Random(7)
    merchant = open_merchant(database, TENANT)
    outcomes: Counter[str] = Counter()
    for _ in range(ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        amounts = [rng.randint(1, PAID_MINOR), rng.randint(1, PAID_MINOR)]
        works = [
            partial(create_refund, agent, TENANT, payment_id, amount)
            for agent, amount in zip(agents, amounts, strict=True)
        ]
        results = [outcome(result) for result in run_together(works)]
        if sum(amounts) <= PAID_MINOR:
            assert results == ["stored", "stored"], (amounts, results)
            outcomes["both fit"] += 1
        else:
            assert sorted(results) == ["refused", "stored"], (amounts, results)
            outcomes["one refused"] += 1
    print(f"{ROUNDS} rounds: {dict(outcomes)}")
    books = assert_rule_zero(database, TENANT)
    assert len(books) == ROUNDS
    assert sum(payment.refunds for payment in books) == 2 * outcomes["both fit"] + outcomes["one refused"]


@pytest.mark.parametrize(
    ("first_minor", "second_minor"),
    [(60, 70), (30, 20)],
    ids=["fits-only-after-the-release", "fits-anyway"],
)
def test_a_refund_racing_the_failure_of_another_is_stored_only_if_it_fits_and_never_deadlocks(
    database: Database, agents: list[Database], caplog: pytest.LogCaptureFixture, first_minor: int, second_minor: int
) -> None:
    """Also a regression test: `lifecycle.move` (then `service.apply`) released the payment's reservation after
    settling the ledger hold, locking the account rows before the payment row, the reverse of
    `create_refund`; on PostgreSQL about one round in eight deadlocked (a 1 s stall, a retry)."""
    caplog.set_level(logging.INFO, logger="paycore.db.engine")
    rng = random.Random(11)
    merchant = open_merchant(database, TENANT)
    outcomes: Counter[str] = Counter()
    for _ in range(RELEASE_ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        first = create_refund(database, TENANT, payment_id, first_minor)
        delay_s = rng.choice([0, 0, 0.001, 0.002])  # let either transaction go first
        works: list[Callable[[], object]] = [
            partial(fail_refund, agents[0], TENANT, first),
            partial(after, delay_s, partial(create_refund, agents[1], TENANT, payment_id, second_minor)),
        ]
        failed, second = (outcome(result) for result in run_together(works))
        assert failed == "changed=True", failed
        assert second in ("stored", "refused"), second
        if first_minor + second_minor <= PAID_MINOR:
            assert second == "stored"
        outcomes[f"second {second}"] += 1
    print(f"{RELEASE_ROUNDS} rounds: {dict(outcomes)}")
    books = assert_rule_zero(database, TENANT)
    assert sum(payment.held_minor for payment in books) == outcomes["second stored"] * second_minor
    retries = [record.getMessage() for record in caplog.records if "transaction retry" in record.getMessage()]
    assert not retries, retries


def after(delay_s: float, work: Callable[[], T]) -> T:
    time.sleep(delay_s)
    return work()
