"""One side of the cancel-versus-claim race, run as its own OS process by
test_payout_cancel_race.py.

    python payout_racer.py '{"database_url": ..., "tenant": ..., "payout_ids": [...],
                             "role": "cancel" | "claim", "index": int, "workers": int,
                             "ready_dir": str}'

Waits until both sides are ready, then: `cancel` posts a cancel for each payout in order,
each in its own transaction, as an API process would (`paycore.payouts.service.cancel`);
`claim` runs the workers' claim (`rounds.claim_queued`, one payout per transaction) until
nothing queued is left. Both walk the payouts in the same order, so they meet on most of
them. Prints one JSON line: what it won and what it lost (with the status the loser saw).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.lifecycle.policy import Policy
from paycore.payouts import rounds, service
from paycore.payouts.errors import PayoutNotCancelable

READY_TIMEOUT_S = 30
CLAIM_ROUNDS_MAX = 10_000
POLICY = Policy(attempts_max=3, backoff_ms=1, backoff_max_ms=2, lease_ms=600_000, batch_max=1)


def wait_for_all(ready_dir: Path, index: int, workers: int) -> None:
    (ready_dir / f"{index}.ready").touch()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(list(ready_dir.glob("*.ready"))) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"racer {index}: the other side was not ready within {READY_TIMEOUT_S} s")
        time.sleep(0.002)


def cancel_all(database: Database, tenant_id: str, payout_ids: list[str]) -> dict[str, Any]:
    won, lost = [], {}
    for payout_id in payout_ids:
        try:
            database.transaction(
                functools.partial(
                    service.cancel, tenant_id=tenant_id, payout_id=payout_id, actor="local", now_us=now_us()
                )
            )
            won.append(payout_id)
        except PayoutNotCancelable as refused:
            lost[payout_id] = refused.details["status"]
    return {"won": won, "lost": lost}


def claim_all(database: Database) -> dict[str, Any]:
    won: list[str] = []
    for _ in range(CLAIM_ROUNDS_MAX):
        claimed = database.transaction(
            lambda c: rounds.claim_queued(c, policy=POLICY, worker_id="racer", actor="worker:send_payouts")
        )
        if not claimed:
            break
        won.extend(payout.id for payout in claimed)
    return {"won": won, "lost": {}}


def main(config: dict[str, Any]) -> dict[str, Any]:
    database = Database(Settings(database_url=config["database_url"], db_pool_size=2))
    try:
        wait_for_all(Path(config["ready_dir"]), config["index"], config["workers"])
        if config["role"] == "cancel":
            return cancel_all(database, config["tenant"], config["payout_ids"])
        return claim_all(database)
    except Exception as error:  # reported to the test, which fails on it
        return {"won": [], "lost": {}, "error": repr(error)}
    finally:
        database.dispose()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
