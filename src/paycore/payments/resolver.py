"""The in-doubt resolver (SPEC §10): ask the processor about every unresolved payment, by its
request id, and apply only what the processor says.

A worker claims due payments (a lease: `claimed_by`, `claimed_until_us`; FOR UPDATE SKIP
LOCKED on PostgreSQL) in one short transaction, calls the processor with no transaction
open, then applies the evidence in another. A worker killed mid-call leaves a lease that
lapses; the next worker takes the payment again. Applying is a compare-and-set, so a payment
resolved twice changes once.

Per attempt: `get_charge(request_id)`; if the processor has no record of it, the same
request (same request id, same parameters) is sent again, which the processor dedupes, so a
request lost on the way is retried and a charge is never made twice. After `attempts_max`
attempts without an answer the payment stays `in_doubt`, unscheduled, for a person: it shows
in `GET /v1/payments?status=in_doubt` and in `paycore_in_doubt_oldest_age_seconds`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us as clock_now_us
from paycore.payments import calls, repository, states, transitions
from paycore.payments.types import Payment, payment_from_row
from paycore.processor.port import Processor


@dataclass(frozen=True)
class ResolverPolicy:
    attempts_max: int
    backoff_ms: int  # first retry delay; doubles per attempt
    backoff_max_ms: int
    lease_ms: int
    batch_max: int


def backoff_ms(attempt: int, policy: ResolverPolicy, rng: random.Random) -> int:
    """Exponential, capped, with "equal jitter": between half and all of the capped delay."""
    capped = min(policy.backoff_max_ms, policy.backoff_ms * 2 ** min(attempt - 1, 30))
    half: int = capped // 2
    return half + rng.randint(0, capped - half)


def resolve_due(database: Database, processor: Processor, policy: ResolverPolicy, worker_id: str) -> int:
    """One bounded round: claim due payments, resolve each. Returns how many were claimed."""
    now = clock_now_us()
    rows = database.transaction(
        lambda connection: repository.claim_due(
            connection,
            now_us=now,
            worker_id=worker_id,
            lease_until_us=now + policy.lease_ms * 1000,
            limit=policy.batch_max,
        )
    )
    rng = random.Random()
    for row in rows:
        resolve_one(database, processor, policy, payment_from_row(row), worker_id, rng)
    return len(rows)


def resolve_one(
    database: Database,
    processor: Processor,
    policy: ResolverPolicy,
    payment: Payment,
    worker_id: str,
    rng: random.Random,
) -> None:
    made = [calls.get_charge(processor, payment)]
    if made[0].evidence.kind == "not_found":
        made.append(calls.charge(processor, payment))  # same request id: deduped by the processor

    def apply(connection: Connection) -> None:
        now = clock_now_us()
        current = transitions.load(connection, payment.tenant_id, payment.id, for_update=True)
        for call in made:
            calls.record(connection, current, call, actor=worker_id, now_us=now)
        attempts = current.resolve_attempts + 1
        if current.claimed_by != worker_id:
            # Our lease lapsed and another worker holds the payment: apply evidence (a
            # compare-and-set, harmless twice) but leave the schedule to the holder.
            transitions.apply(connection, current, made[-1].evidence, cause="resolver", actor=worker_id, now_us=now)
            return
        delay_ms = backoff_ms(attempts, policy, rng)
        due = None if attempts >= policy.attempts_max else now + delay_ms * 1000
        schedule = {
            "resolve_attempts": attempts,
            "next_attempt_at_us": due,
            "claimed_by": None,
            "claimed_until_us": None,
        }
        applied = transitions.apply(
            connection, current, made[-1].evidence, cause="resolver", actor=worker_id, now_us=now, schedule=schedule
        )
        if not applied.changed and applied.payment.status in states.UNRESOLVED:
            repository.set_schedule(connection, payment.tenant_id, payment.id, schedule)
            if due is None and applied.payment.status == states.PROCESSING:
                # Out of attempts with the processor still saying `pending`: make it visible
                # in the in-doubt queue for a person rather than leave it quietly processing.
                gave_up = transitions.Evidence("unreachable")
                transitions.apply(
                    connection, applied.payment, gave_up, cause="attempts_exhausted", actor=worker_id, now_us=now
                )

    database.transaction(apply)
