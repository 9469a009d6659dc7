"""A refunding worker, run as its own OS process by test_refund_race_processes.py.

    python refunder.py '{"database_url": ..., "tenant": ..., "payment_ids": [...],
                         "rounds": int, "amount_max": int, "seed": int, "index": int,
                         "workers": int, "ready_dir": str}'

Marks itself ready (a file `<index>.ready` in `ready_dir`) and waits until all `workers` are
ready, so that they start together. Then, `rounds` times: creates a refund of a random
amount (1..amount_max) on a random one of the shared payments through
`paycore.refunds.service.create_refund`, each in its own database transaction, as an API
process would; now and then it fails or settles one of its own pending refunds (the
processor's answer), so releases race the reservations too. Prints one JSON line: what it
created, what was refused, what it failed and settled, and any unexpected error.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.refunds import lifecycle, service
from paycore.refunds.errors import OverRefund

READY_TIMEOUT_S = 30
ROUNDS_MAX = 10_000
FAIL_EVERY = 5  # every 5th round, fail one of this worker's pending refunds
SETTLE_EVERY = 7  # every 7th round, settle one


def wait_for_all(ready_dir: Path, index: int, workers: int) -> None:
    (ready_dir / f"{index}.ready").touch()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(list(ready_dir.glob("*.ready"))) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"worker {index}: the other workers were not ready within {READY_TIMEOUT_S} s")
        time.sleep(0.005)


def create(database: Database, tenant_id: str, payment_id: str, amount_minor: int) -> str:
    new = service.NewRefund(payment_id=payment_id, amount_minor=amount_minor)
    return database.transaction(
        lambda connection: service.create_refund(connection, tenant_id, new, now_us=now_us(), actor="local").id
    )


def answer(database: Database, tenant_id: str, refund_id: str, to_state: str) -> None:
    def work(connection: Any) -> None:
        refund = service.MACHINE.load(connection, tenant_id, refund_id, for_update=True)
        applied = lifecycle.move(connection, refund, to_state, cause="test", actor="local", now_us=now_us())
        assert applied.changed, applied  # only this worker answers its own refunds

    database.transaction(work)


def main(config: dict[str, Any]) -> dict[str, Any]:
    assert config["rounds"] <= ROUNDS_MAX
    rng = random.Random(config["seed"])
    tenant_id = config["tenant"]
    database = Database(Settings(database_url=config["database_url"], db_pool_size=2))
    report: dict[str, Any] = {"created": [], "refused": 0, "failed": [], "settled": [], "errors": []}
    pending: list[str] = []
    try:
        # Connect (and run SQLite's pragmas) before the start line, so that every worker is
        # ready to write when they start together, not one still opening its connection.
        with database.read():
            pass
        wait_for_all(Path(config["ready_dir"]), config["index"], config["workers"])
        for number in range(1, config["rounds"] + 1):
            payment_id = rng.choice(config["payment_ids"])
            amount_minor = rng.randint(1, config["amount_max"])
            try:
                refund_id = create(database, tenant_id, payment_id, amount_minor)
                report["created"].append({"id": refund_id, "payment_id": payment_id, "amount_minor": amount_minor})
                pending.append(refund_id)
            except OverRefund:
                report["refused"] += 1
            for every, to_state, outcome in ((FAIL_EVERY, "failed", "failed"), (SETTLE_EVERY, "succeeded", "settled")):
                if number % every == 0 and pending:
                    refund_id = pending.pop(rng.randrange(len(pending)))
                    answer(database, tenant_id, refund_id, to_state)
                    report[outcome].append(refund_id)
    except Exception as error:  # reported to the test, which fails on it
        report["errors"].append(repr(error))
    finally:
        database.dispose()
    return report


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
