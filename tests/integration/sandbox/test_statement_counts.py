"""What the sandbox's own work costs in SQL, counted (never timed) on its engine, per database,
so the counts can only go down: a charge, a refund, a capture, a cancel, a payout, a round of webhook deliveries,
and a background round with nothing due. Counted as paycore's (tests/integration/payments/
test_statement_counts.py): every statement the driver or SQLAlchemy sends, SQLite's BEGIN
IMMEDIATE included, and every COMMIT.

Before these were lean (its webhooks delivered one transaction each), a round of ten
deliveries took 33 statements and 11 commits on SQLite, a payout 5 and 1, and a background
round with nothing due 6 statements and 3 commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event

from paycore.db import observers
from paycore.processor.port import CancelRequest, CaptureRequest, ChargeRequest, RefundRequest
from paycore_sandbox import Sandbox
from tests.integration.sandbox.bank_support import ach
from tests.integration.sandbox.conftest import RecordingSink

ROUND = 10

# (statements, commits) at most, per database and operation. PostgreSQL's BEGIN is implicit.
BOUNDS: dict[tuple[str, str], tuple[int, int]] = {
    ("sqlite", "charge"): (3, 1),  # BEGIN IMMEDIATE, the charge, its webhook
    ("postgresql", "charge"): (2, 1),
    ("sqlite", "refund"): (6, 1),  # + the dedupe's read, the charge's read, the reservation
    ("postgresql", "refund"): (5, 1),
    # BEGIN IMMEDIATE, the dedupe's read, the charge's read, the action, the guarded update, its webhook
    ("sqlite", "capture"): (6, 1),
    ("postgresql", "capture"): (5, 1),
    ("sqlite", "cancel"): (6, 1),
    ("postgresql", "cancel"): (5, 1),
    ("sqlite", "payout"): (4, 1),  # BEGIN IMMEDIATE, the dedupe's read, joining the open batch, the payout
    ("postgresql", "payout"): (3, 1),
    # Two transactions: the lease (read, update) and the record (attempts, delivered).
    ("sqlite", "deliveries"): (6, 2),
    ("postgresql", "deliveries"): (3, 2),  # the lease's read and update are one statement
    # Nothing due: one read (SQLite's on a connection of its own, outside the engine).
    ("sqlite", "idle"): (0, 0),
    ("postgresql", "idle"): (1, 1),  # the read, in a transaction of its own
}


@dataclass
class Count:
    statements: list[str] = field(default_factory=list)
    commits: int = 0


@contextmanager
def counting(sandbox: Sandbox) -> Iterator[Count]:
    count = Count()
    engine = sandbox.database.engine

    def statement(sql: str, parameters: Any, executemany: bool) -> None:
        count.statements.append(" ".join(sql.split())[:120])

    def commit(conn: Any) -> None:
        count.commits += 1

    event.listen(engine, "commit", commit)
    try:
        with observers.observing(engine, statement):
            yield count
    finally:
        event.remove(engine, "commit", commit)


def check(sandbox: Sandbox, operation: str, count: Count) -> None:
    backend = sandbox.database.engine.dialect.name
    statements_max, commits_max = BOUNDS[(backend, operation)]
    measured = f"{operation} on {backend}: {len(count.statements)} statements, {count.commits} commits"
    print(measured, count.statements)
    assert len(count.statements) <= statements_max and count.commits <= commits_max, measured


def test_a_charge_and_a_refund(sandbox_on_backend: Sandbox) -> None:
    sandbox_on_backend.charge(ChargeRequest("pay_0", "merchant_1", 5_000, "USD", "tok_ok"))  # warm
    with counting(sandbox_on_backend) as charged:
        taken = sandbox_on_backend.charge(ChargeRequest("pay_1", "merchant_1", 5_000, "USD", "tok_ok"))
    with counting(sandbox_on_backend) as refunded:
        sandbox_on_backend.refund(RefundRequest("rf_1", "merchant_1", taken.processor_charge_id, 1_000, "USD"))

    check(sandbox_on_backend, "charge", charged)
    check(sandbox_on_backend, "refund", refunded)


def test_a_capture_and_a_cancel(sandbox_on_backend: Sandbox) -> None:
    def authorize(request_id: str) -> str:
        request = ChargeRequest(request_id, "merchant_1", 5_000, "USD", "tok_ok", capture="manual")
        return sandbox_on_backend.charge(request).processor_charge_id

    first, second = authorize("pay_1"), authorize("pay_2")
    sandbox_on_backend.capture(CaptureRequest("cap_0", "merchant_1", authorize("pay_0"), 1_000, "USD"))  # warm
    with counting(sandbox_on_backend) as captured:
        assert (
            sandbox_on_backend.capture(CaptureRequest("cap_1", "merchant_1", first, 1_000, "USD")).status == "captured"
        )
    with counting(sandbox_on_backend) as canceled:
        assert sandbox_on_backend.cancel(CancelRequest("can_1", "merchant_1", second)).status == "canceled"

    check(sandbox_on_backend, "capture", captured)
    check(sandbox_on_backend, "cancel", canceled)


def test_a_payout_joining_the_open_batch(sandbox_on_backend: Sandbox) -> None:
    sandbox_on_backend.send_payout(ach("po_0"))  # opens the batch
    with counting(sandbox_on_backend) as paid:
        assert sandbox_on_backend.send_payout(ach("po_1")).status == "accepted"

    check(sandbox_on_backend, "payout", paid)


def test_a_round_of_deliveries_is_two_transactions_whatever_its_size(sandbox_on_backend: Sandbox) -> None:
    for index in range(ROUND):
        sandbox_on_backend.charge(ChargeRequest(f"pay_{index}", "merchant_1", 5_000, "USD", "tok_ok"))
    sink = RecordingSink()
    with counting(sandbox_on_backend) as delivered:
        assert sandbox_on_backend.deliver_due(sink) == ROUND

    check(sandbox_on_backend, "deliveries", delivered)


def test_a_background_round_with_nothing_due_takes_no_write_lock(sandbox_on_backend: Sandbox) -> None:
    sandbox_on_backend.settle_due()  # warm: the read's connection
    with counting(sandbox_on_backend) as idle:
        assert sandbox_on_backend.settle_due() == 0

    check(sandbox_on_backend, "idle", idle)
