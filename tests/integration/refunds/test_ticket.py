"""The support ticket: "an agent clicked Refund twice within a minute; the customer got more
than they paid" (SPEC §7, rule zero).

Reproduced with two refunds of 60 on a payment of 100, sent at the same moment from two
threads, each with its own `Database` (its own connections and transactions, and on SQLite
its own in-process writer lock, as two API processes would have), round after round:

- a naive refund, written here and only here, reads the payment's refunded total in one
  statement, then inserts the refund if it fits: a check-then-insert, with a few
  milliseconds between, as any real request has. Both clicks read 0, both insert: the test
  shows the customer getting 120 back at least once, so the harness can see the bug;
- paycore's `service.create_refund` reserves the amount with one conditional UPDATE of the
  payment row in the transaction that stores the refund: in every round exactly one click
  succeeds and the other is refused with `over_refund`, and no payment is over-refunded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from functools import partial

import pytest
from sqlalchemy import ColumnElement, Connection, func, insert, select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.payments.models import payments as payments_table
from paycore.refunds.errors import OverRefund
from paycore.refunds.models import refunds as refunds_table
from paycore.refunds.states import RELEASED
from tests.support.refunds import assert_rule_zero, create_refund, new_payment, open_merchant, run_together

TENANT = "ticket"
PAID_MINOR = 100
CLICK_MINOR = 60  # one click fits, two do not
ROUNDS = 200
NAIVE_WINDOW_S = 0.005  # between the naive check and its insert: a real request's work


@pytest.fixture
def clicks(settings: Settings) -> Iterator[list[Database]]:
    """One `Database` per agent's click."""
    databases = [Database(settings) for _ in range(2)]
    yield databases
    for database in databases:
        database.dispose()


def naive_create_refund(database: Database, payment_id: str, amount_minor: int, number: int) -> bool:
    """Check, then insert: what the ticket's code did. True if it stored the refund."""
    refunded = func.coalesce(func.sum(refunds_table.c.amount_minor), 0)
    total = (
        select(payments_table.c.amount_minor, select(refunded).where(*_holding(payment_id)).scalar_subquery())
        .where(payments_table.c.tenant_id == TENANT, payments_table.c.id == payment_id)
        .select_from(payments_table)
    )
    with database.read() as connection:
        paid_minor, refunded_minor = connection.execute(total).one()
    time.sleep(NAIVE_WINDOW_S)
    if refunded_minor + amount_minor > paid_minor:
        return False
    database.transaction(lambda connection: _insert(connection, payment_id, amount_minor, f"rf_naive_{number}"))
    return True


def _holding(payment_id: str) -> tuple[ColumnElement[bool], ...]:
    return (
        refunds_table.c.tenant_id == TENANT,
        refunds_table.c.payment_id == payment_id,
        refunds_table.c.status.not_in(sorted(RELEASED)),
    )


def _insert(connection: Connection, payment_id: str, amount_minor: int, refund_id: str) -> None:
    """The refund row alone: no reservation on the payment, no ledger hold."""
    connection.execute(
        insert(refunds_table),
        {
            "tenant_id": TENANT,
            "id": refund_id,
            "payment_id": payment_id,
            "idempotency_key": None,
            "amount_minor": amount_minor,
            "currency": "USD",
            "reason": "ticket",
            "status": "pending",
            "failure_code": None,
            "processor_request_id": refund_id,
            "processor_reference": None,
            "transfer_id": None,
            "attempts": 0,
            "next_attempt_at_us": None,
            "claimed_by": None,
            "claimed_until_us": None,
            "in_doubt_since_us": None,
            "created_at_us": 0,
            "updated_at_us": 0,
        },
    )


def held_minor(database: Database, payment_id: str) -> int:
    with database.read() as connection:
        query = select(func.coalesce(func.sum(refunds_table.c.amount_minor), 0)).where(*_holding(payment_id))
        return int(connection.execute(query).scalar_one())


def test_the_naive_check_then_insert_gives_the_customer_more_than_they_paid(
    database: Database, clicks: list[Database]
) -> None:
    merchant = open_merchant(database, TENANT)
    over_refunded = 0
    for round_number in range(ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        results = run_together(
            [
                partial(naive_create_refund, click, payment_id, CLICK_MINOR, 2 * round_number + n)
                for n, click in enumerate(clicks)
            ]
        )
        assert all(isinstance(result, bool) for result in results), results
        over_refunded += held_minor(database, payment_id) > PAID_MINOR
    print(f"naive: over-refunded in {over_refunded} of {ROUNDS} rounds")
    assert over_refunded >= 1, "the naive refund never over-refunded: the race is not reproduced"


def test_two_clicks_on_refund_never_give_back_more_than_was_paid(database: Database, clicks: list[Database]) -> None:
    merchant = open_merchant(database, TENANT)
    outcomes: Counter[tuple[str, ...]] = Counter()
    for _ in range(ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        results = run_together([partial(create_refund, click, TENANT, payment_id, CLICK_MINOR) for click in clicks])
        kinds = tuple(sorted("created" if isinstance(result, str) else type(result).__name__ for result in results))
        outcomes[kinds] += 1
        assert kinds == ("OverRefund", "created"), results
        assert any(isinstance(result, OverRefund) for result in results)
        assert held_minor(database, payment_id) == CLICK_MINOR
    print(f"paycore: {dict(outcomes)}")
    books = assert_rule_zero(database, TENANT)
    assert len(books) == ROUNDS and all(payment.refunds == 1 for payment in books)
