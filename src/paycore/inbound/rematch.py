"""Kept events matched again (SPEC §10): an event for an object paycore does not know (yet) is
kept `unmatched` and tried again by a worker (`rematch_due`) with the lifecycle's backoff and
jitter, never dropped; once out of tries it is `abandoned`. `settle` leaves a stored event's row
as its tries left it, for the first try (`service.receive`) and every later one.
"""

from __future__ import annotations

import json
import random
from functools import partial
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.inbound import matching, repository
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.kit.clock import now_us as clock_now_us
from paycore.lifecycle import faults
from paycore.lifecycle.policy import Backoff, retry_at_us
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.refunds import service as refunds

REMATCH_JOB: Final = "rematch_webhooks"
REMATCH_ATTEMPTS_MAX = 50
# The lifecycle's backoff with jitter: kept events that failed together are not retried together.
REMATCH_BACKOFF: Final = Backoff(first_ms=1000, max_ms=3_600_000)
# The machine of the object each kind of event names (a fault is left on it).
_MACHINES: Final[dict[str, Any]] = {"charge": payments.MACHINE, "refund": refunds.MACHINE, "payout": payouts.MACHINE}


def settle(
    connection: Connection,
    tenant_id: str,
    event_id: str,
    result: str,
    *,
    attempts: int,
    now_us: int,
    rng: random.Random,
) -> None:
    """The event's row after `attempts` tries to match it: done, or due again with the
    lifecycle's backoff and jitter, or abandoned once out of tries (the lifecycle's give-up)."""
    values: dict[str, Any] = {"attempts": attempts}
    if result == "unmatched":
        due = retry_at_us(attempts, REMATCH_BACKOFF, rng, now_us=now_us, attempts_max=REMATCH_ATTEMPTS_MAX)
        if due is None:
            values.update(status="abandoned", next_attempt_at_us=None, processed_at_us=now_us)
        else:
            values.update(status="unmatched", next_attempt_at_us=due)
    else:
        status = "applied" if result == "applied" else "stale"  # stale, mismatch, conflict: kept, not applied
        values.update(status=status, next_attempt_at_us=None, processed_at_us=now_us)
    repository.set_values(connection, tenant_id, event_id, values)


def rematch_due(database: Database, batch_max: int) -> int:
    """Try again to match kept `unmatched` events whose retry is due. Returns how many. An event
    whose object cannot be moved (`lifecycle.faults`) leaves the object on its fault and stays
    `unmatched`, tried again with backoff; the other events are matched."""

    def work(connection: Connection, *, isolation: faults.Isolation) -> int:
        now = clock_now_us()
        rows = repository.due_unmatched(connection, now, batch_max)
        rng = random.Random()
        for row in rows:
            about = {"event_id": row.event_id, "tenant_id": row.tenant_id}
            result = isolation.run(connection, partial(_rematch, connection, row.payload, now), about=about)
            if isinstance(result, faults.Fault):
                _fault(connection, row.tenant_id, row.payload, result, now_us=now, rng=rng)
                result = "unmatched"
            settle(connection, row.tenant_id, row.event_id, result, attempts=row.attempts + 1, now_us=now, rng=rng)
        return len(rows)

    return faults.transaction(database, work)


def _rematch(connection: Connection, payload: str, now_us: int) -> str:
    return matching.match(connection, ProcessorEvent.model_validate(json.loads(payload)), now_us)


def _fault(
    connection: Connection, tenant_id: str, payload: str, fault: faults.Fault, *, now_us: int, rng: random.Random
) -> None:
    """The object the event names left on `fault` (its schedule unchanged), if paycore has it;
    else there is only the `work_fault` line the isolation logged."""
    data = json.loads(payload).get("data", {})
    machine = _MACHINES.get(str(data.get("object")))
    item = None if machine is None else machine.find(connection, tenant_id, str(data.get("request_id")))
    if machine is None or item is None:
        return
    faults.left(
        connection,
        machine,
        item,
        fault,
        job=REMATCH_JOB,
        actor=actors.worker(REMATCH_JOB),
        now_us=now_us,
        policy=None,
        rng=rng,
    )


def oldest_rematch_due_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest kept event due to be matched again fell due (the rematch job's lag)."""
    return repository.oldest_rematch_due_us(connection, now_us)
