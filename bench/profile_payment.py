"""Profile one payment in-process: the payments service and the in-process sandbox, no HTTP.

    .venv/bin/python bench/profile_payment.py [--payments 300] [--top 25]

Prints payments/s (profiled, so slower than real) and the cProfile table by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.payments.types import NewPayment
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox

WARM_UP = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payments", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="paycore-profile-")
    database = Database(Settings(database_url=f"sqlite:///{workdir}/paycore.db"))
    migrate.upgrade(database)
    processor = InProcessTransport(Sandbox.open(f"sqlite:///{workdir}/sandbox.db"), timeout_ms=5_000)
    account = database.transaction(
        lambda connection: ledger.create_account(
            connection,
            "t",
            code="m",
            currency="USD",
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now_us(),
        )
    ).id
    timings = payments.PaymentTimings(processing_stale_ms=60_000, wait_ms=10_000, first_retry_ms=1_000)
    new = NewPayment(1000, "USD", "card", "tok_ok", account, None, {}, "local")

    def pay(index: int) -> None:
        scope = KeyScope("t", f"key-{index}", "fingerprint", now_us(), None)
        payments.create_payment(database, processor, scope, new, timings=timings, render_refusal=render_refusal)

    for index in range(WARM_UP):
        pay(index)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    for index in range(WARM_UP, WARM_UP + args.payments):
        pay(index)
    profile.disable()
    elapsed = time.perf_counter() - started
    print(f"{args.payments / elapsed:.0f} payments/s profiled ({elapsed / args.payments * 1000:.2f} ms each)")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
