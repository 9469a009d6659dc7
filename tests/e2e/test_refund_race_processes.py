"""SPEC §7, rule zero across OS processes: "two agents clicking Refund at the same moment, on
different API processes, against PostgreSQL".

Four refunder processes (refunder.py) share a few payments and create refunds on them at
the same time, each in its own transaction through `paycore.refunds.service`, while failing
and settling some of their own. No lock in a process can be what keeps the money right here:
only the database can. Afterwards no payment is over-refunded, each payment's
`refunded_minor` is exactly the sum of its refunds that hold their amount, the refunds stored
are exactly the ones the workers were told were created, and the ledger verifies.
On PostgreSQL, and on one SQLite file shared by the four processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from paycore.db.engine import Database
from paycore.refunds.models import refunds as refunds_table
from tests.support.refunds import assert_rule_zero, new_payment, open_merchant

REFUNDER = Path(__file__).with_name("refunder.py")
TENANT = "refund-race"
WORKERS = 4
PAYMENTS = 6
PAID_MINOR = 900  # with the releases of failed refunds, the payments fill up about two thirds through
AMOUNT_MAX_MINOR = 50  # ~25 on average: 400 rounds ask for about 10,000, far more than fits
ROUNDS_PER_WORKER = 100
RUN_TIMEOUT_S = 60


def run_refunders(database_url: str, payment_ids: list[str], ready_dir: Path) -> list[dict[str, Any]]:
    workers = []
    for index in range(WORKERS):
        config = {
            "database_url": database_url,
            "tenant": TENANT,
            "payment_ids": payment_ids,
            "rounds": ROUNDS_PER_WORKER,
            "amount_max": AMOUNT_MAX_MINOR,
            "seed": 100 + index,
            "index": index,
            "workers": WORKERS,
            "ready_dir": str(ready_dir),
        }
        workers.append(
            subprocess.Popen(
                [sys.executable, str(REFUNDER), json.dumps(config)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    reports = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert worker.returncode == 0, err
            reports.append(json.loads(out))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=10)
    return reports


@pytest.mark.slow
def test_4_processes_refunding_the_same_payments_never_over_refund(
    database_url: str, database: Database, tmp_path: Path
) -> None:
    merchant = open_merchant(database, TENANT)
    payment_ids = [new_payment(database, TENANT, merchant, PAID_MINOR) for _ in range(PAYMENTS)]
    reports = run_refunders(database_url, payment_ids, tmp_path)

    errors = [error for report in reports for error in report["errors"]]
    assert not errors, errors
    created = {refund["id"]: refund for report in reports for refund in report["created"]}
    failed = {refund_id for report in reports for refund_id in report["failed"]}
    settled = {refund_id for report in reports for refund_id in report["settled"]}
    refused = sum(report["refused"] for report in reports)
    assert len(created) + refused == WORKERS * ROUNDS_PER_WORKER
    print(f"{len(created)} refunds created ({len(failed)} failed, {len(settled)} settled), {refused} refused")
    assert refused > 0 and failed and settled, "the payments never filled up: nothing raced"

    books = assert_rule_zero(database, TENANT)
    assert len(books) == PAYMENTS
    with database.read() as connection:
        stored = {row.id: row for row in connection.execute(select(refunds_table))}
    # Exactly the refunds the workers were told about, each as they left it.
    assert set(stored) == set(created)
    for refund_id, refund in created.items():
        row = stored[refund_id]
        assert (row.payment_id, row.amount_minor) == (refund["payment_id"], refund["amount_minor"])
        expected = "failed" if refund_id in failed else "succeeded" if refund_id in settled else "pending"
        assert row.status == expected, (refund_id, row.status)
    # The processes did race: each stored refunds, and payments were shared between them.
    assert all(report["created"] for report in reports), [len(report["created"]) for report in reports]
    workers_per_payment = Counter(
        payment_id for report in reports for payment_id in {refund["payment_id"] for refund in report["created"]}
    )
    print(f"processes that refunded each payment: {sorted(workers_per_payment.values())}")
    assert max(workers_per_payment.values()) >= 2, workers_per_payment
