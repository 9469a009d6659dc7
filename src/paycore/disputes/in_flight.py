"""A tenant's answer whose reply was lost, settled by the worker's status query (ADR 0030
decision 6: an evidence submission whose answer is lost is resolved by evidence like every
other call).

`answers` keeps the dispute (`keep`, in the transaction that records the lost call: one row per
dispute, `dispute_answers_in_flight`, migration 0038). The worker's `resolve_dispute_answers`
round (`resolve_due`) is commit, call, commit, as every worker round (`in_doubt.resolver`):

1. claim (one short transaction): the due rows with a lease (`lifecycle.lease.claim`: tenant by
   tenant, FOR UPDATE SKIP LOCKED on PostgreSQL, so rounds on several processes take disjoint
   rows; SQLite has one writer), their round counted;
2. ask the processor for each dispute (`service.ask_status`), no transaction open;
3. apply (one transaction per row): the answer recorded through `service.record`, which deletes
   the row once the processor's word shows the dispute takes no more answers (a status out of
   `needs_response` / `warning_needs_response`, or its evidence in); a row still there is
   scheduled again with the lifecycle's backoff and jitter, and left unscheduled after the
   policy's rounds (the dispute's webhooks, `refresh` or a retry with the key still settle it).

A worker killed between 1 and 3 leaves a lease that lapses; the row is then taken again. Whatever
settles the dispute first (a webhook, a retry, reconciliation's query), the row goes with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from sqlalchemy import Connection, Row

from paycore.db.engine import Database
from paycore.disputes import repository, service
from paycore.disputes.models import dispute_answers_in_flight
from paycore.disputes.types import Dispute, dispute_from_row
from paycore.kit.clock import now_us as clock_now_us
from paycore.lifecycle import lease
from paycore.lifecycle.calls import Call
from paycore.lifecycle.policy import Policy, retry_at_us
from paycore.processor.port import Processor

JOB: Final = "resolve_dispute_answers"


def keep(connection: Connection, dispute: Dispute, *, kind: str, request_id: str, now_us: int) -> bool:
    """Keep the dispute for the worker, due now; False when it is kept already."""
    values: dict[str, Any] = {
        "tenant_id": dispute.tenant_id,
        "id": dispute.id,
        "processor_dispute_id": dispute.processor_dispute_id,
        "kind": kind,
        "request_id": request_id,
        "attempts": 0,
        "next_attempt_at_us": now_us,
        "claimed_by": None,
        "claimed_until_us": None,
        "created_at_us": now_us,
    }
    return repository.keep_in_flight(connection, values)


@dataclass(frozen=True)
class Round:
    claimed: int  # rows this round took
    settled: int  # of them, cleared by the answer (the dispute takes no more answers)


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> Round:
    """One bounded round (see the module): at most `policy.batch_max` disputes asked about."""
    rows = database.transaction(partial(_claim, policy=policy, holder=worker_id))
    rng = random.Random()
    settled = 0
    for row in rows:
        call = service.ask_status(
            processor, row.processor_dispute_id, ids={"dispute_id": row.id, "tenant_id": row.tenant_id}
        )
        finish = partial(_finish, row=row, call=call, policy=policy, holder=worker_id, actor=actor, rng=rng)
        settled += database.transaction(finish)
    return Round(len(rows), settled)


def _claim(connection: Connection, *, policy: Policy, holder: str) -> list[Row[Any]]:
    now = clock_now_us()
    table = dispute_answers_in_flight
    return lease.claim(
        connection,
        table,
        repository.due_in_flight(now),
        rank=table.c.next_attempt_at_us,
        limit=policy.batch_max,
        holder=holder,
        until_us=now + policy.lease_ms * 1000,
        values={"attempts": table.c.attempts + 1},
    )


def _finish(
    connection: Connection,
    *,
    row: Row[Any],
    call: Call[Any],
    policy: Policy,
    holder: str,
    actor: str,
    rng: random.Random,
) -> bool:
    """The answer applied; True when it settled the kept answer (the row is gone)."""
    now = clock_now_us()
    held = repository.get(connection, row.tenant_id, row.id)
    about = None if held is None else dispute_from_row(held)
    service.apply_status(connection, call, actor=actor, now_us=now, about=about)
    if repository.in_flight(connection, row.tenant_id, row.id) is None:
        return True
    due = retry_at_us(row.attempts, policy.backoff, rng, now_us=now, attempts_max=policy.attempts_max)
    repository.schedule_in_flight(connection, row.tenant_id, row.id, holder, due)  # False: taken over
    return False


def oldest_due_us(connection: Connection, *, now_us: int) -> int | None:
    """When the kept answer waiting longest fell due (the job's lag)."""
    return repository.oldest_in_flight_due_us(connection, now_us)
