"""Helpers for the refund concurrency tests: a merchant, settled payments to refund, two
workers released together, and the books of every payment checked against rule zero
(SPEC §7: the refunds of a payment that still hold their amount never exceed it)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, case, func, select

from paycore.db.engine import Database
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.ledger.verify import verify
from paycore.payments import service as payments
from paycore.payments.models import payments as payments_table
from paycore.refunds import lifecycle as refund_lifecycle
from paycore.refunds import service as refunds
from paycore.refunds.models import refunds as refunds_table
from paycore.refunds.states import RELEASED

CURRENCY = "USD"
RACE_TIMEOUT_S = 30


def open_merchant(database: Database, tenant_id: str, *, now_us: int = 0) -> str:
    """The tenant's merchant account (credit-normal, never overdrawn), where payments land."""

    def work(connection: Connection) -> str:
        account = ledger.create_account(
            connection,
            tenant_id,
            code="merchant.main",
            currency=CURRENCY,
            normal_balance="credit",
            no_overdraft=True,
            metadata={},
            now_us=now_us,
        )
        return account.id

    return database.transaction(work)


def new_payment(database: Database, tenant_id: str, merchant_id: str, amount_minor: int, *, now_us: int = 0) -> str:
    payment_id = ids.new_id("pay")
    database.transaction(
        lambda connection: payments.import_settled_payment(
            connection,
            tenant_id,
            payment_id=payment_id,
            amount_minor=amount_minor,
            currency=CURRENCY,
            destination_account_id=merchant_id,
            now_us=now_us,
        )
    )
    return payment_id


def create_refund(database: Database, tenant_id: str, payment_id: str, amount_minor: int, *, now_us: int = 0) -> str:
    """paycore's own refund creation, in its own transaction; raises OverRefund when refused."""
    new = refunds.NewRefund(payment_id=payment_id, amount_minor=amount_minor)
    return database.transaction(
        lambda connection: refunds.create_refund(connection, tenant_id, new, now_us=now_us, actor="local").id
    )


def fail_refund(database: Database, tenant_id: str, refund_id: str, *, now_us: int = 0) -> bool:
    """The processor's failure of a refund: True if this call moved it to failed."""

    def work(connection: Connection) -> bool:
        refund = refunds.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
        return refund_lifecycle.move(
            connection, refund, "failed", cause="test_failed", actor="local", now_us=now_us
        ).changed

    return database.transaction(work)


def run_together(works: Sequence[Callable[[], Any]], *, timeout_s: float = RACE_TIMEOUT_S) -> list[Any]:
    """Run each work on its own thread, released at once by a barrier; the results in order
    (an exception in place of its result)."""
    barrier = threading.Barrier(len(works), timeout=timeout_s)
    results: list[Any] = [None] * len(works)

    def body(index: int) -> None:
        try:
            barrier.wait()
            results[index] = works[index]()
        except BaseException as error:  # reported to the test, never swallowed
            results[index] = error

    threads = [threading.Thread(target=body, args=(index,), daemon=True) for index in range(len(works))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in threads), f"a worker still runs after {timeout_s} s"
    return results


@dataclass(frozen=True)
class Books:
    """One payment as its rows tell it."""

    payment_id: str
    amount_minor: int
    refunded_minor: int  # the reservation on the payment row
    held_minor: int  # the refunds that are not failed or canceled, added up
    refunds: int

    @property
    def over_refunded(self) -> bool:
        return self.held_minor > self.amount_minor


def books(connection: Connection, tenant_id: str) -> list[Books]:
    """Every payment of the tenant with its refunds, in one statement."""
    held = func.coalesce(
        func.sum(case((refunds_table.c.status.in_(sorted(RELEASED)), 0), else_=refunds_table.c.amount_minor)), 0
    )
    query = (
        select(
            payments_table.c.id,
            payments_table.c.amount_minor,
            payments_table.c.refunded_minor,
            held,
            func.count(refunds_table.c.id),
        )
        .select_from(
            payments_table.outerjoin(
                refunds_table,
                (refunds_table.c.tenant_id == payments_table.c.tenant_id)
                & (refunds_table.c.payment_id == payments_table.c.id),
            )
        )
        .where(payments_table.c.tenant_id == tenant_id)
        .group_by(payments_table.c.id, payments_table.c.amount_minor, payments_table.c.refunded_minor)
        .order_by(payments_table.c.id)
    )
    return [Books(row[0], int(row[1]), int(row[2]), int(row[3]), int(row[4])) for row in connection.execute(query)]


def assert_rule_zero(database: Database, tenant_id: str) -> list[Books]:
    """No payment over-refunded, each payment's reservation equal to its holding refunds, and
    the ledger verified (balanced transfers, cached balances equal to the entries)."""
    with database.read() as connection:
        found = books(connection, tenant_id)
        report = verify(connection)
    over = [payment for payment in found if payment.over_refunded]
    assert not over, f"{len(over)} payments over-refunded, e.g. {over[:3]}"
    drifted = [payment for payment in found if payment.refunded_minor != payment.held_minor]
    assert not drifted, f"{len(drifted)} payments whose refunded_minor is not their refunds' sum: {drifted[:3]}"
    assert report.ok, report.problems
    return found
