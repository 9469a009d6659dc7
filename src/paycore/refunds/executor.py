"""The worker side of refunds (SPEC §7.1, §8, §10): send accepted refunds to the processor,
and resolve the ones whose outcome is not known yet. Commit, call, commit, as payments do
(docs/adr/0006-payments-outside-the-transaction.md):

`send_due` claims due `pending` refunds with a lease (`claimed_by`, `claimed_until_us`; FOR
UPDATE SKIP LOCKED on PostgreSQL) and moves each to `processing` in the claim transaction, so
a refund is marked as sent before any call can have been made. Then, with no transaction
open, it calls `processor.refund` with the request id stored when the refund was created,
and applies the answer in a new transaction: a result or a refusal settles the refund, a
`pending` answer leaves it `processing` for the resolver, no answer makes it `in_doubt`.

`resolve_due` claims due `processing` and `in_doubt` refunds, asks `get_refund(request_id)`
and, when the processor has no record of it, sends the *same* request again (the processor
dedupes on its id, so nothing is refunded twice). Bounded exponential backoff with jitter;
after `attempts_max` attempts the refund stays `in_doubt`, unscheduled, for a person (the
in-doubt gauges of `/metrics`).

A worker killed at any point leaves a lease that lapses; a `processing` refund is then
taken by the resolver, which asks before it re-sends. Never guesses.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us as clock_now_us
from paycore.payments.resolver import ResolverPolicy, backoff_ms
from paycore.processor.port import Processor, RefundRequest
from paycore.refunds import calls, charges, evidence, repository, service, states
from paycore.refunds.types import Refund, refund_from_row

_SEND_STATUSES = (states.PENDING,)
_RESOLVE_STATUSES = (states.PROCESSING, states.IN_DOUBT)
NOT_SENDABLE_CODE = "payment_reference_missing"


@dataclass(frozen=True)
class Claimed:
    refund: Refund  # as it stands after the claim transaction
    request: RefundRequest | None  # None: the payment has no processor reference to refund against


def send_due(database: Database, processor: Processor, policy: ResolverPolicy, worker_id: str) -> int:
    """One bounded round: claim due `pending` refunds and send each. Returns how many were claimed."""
    now = clock_now_us()

    def claim_and_start(connection: Connection) -> tuple[int, list[Claimed]]:
        claimed = _claim(connection, statuses=_SEND_STATUSES, now_us=now, policy=policy, worker=worker_id)
        return len(claimed), _start_all(connection, claimed=claimed, now_us=now, worker_id=worker_id)

    count, started = database.transaction(claim_and_start)
    rng = random.Random()
    for item in started:
        assert item.request is not None and item.refund.status == states.PROCESSING
        call = calls.refund(processor, item.request)
        finish = partial(_finish_send, sent=item.refund, call=call, policy=policy, worker_id=worker_id, rng=rng)
        database.transaction(finish)
    return count


def resolve_due(database: Database, processor: Processor, policy: ResolverPolicy, worker_id: str) -> int:
    """One bounded round: claim due unresolved refunds, resolve each. Returns how many were claimed."""
    now = clock_now_us()
    claimed = database.transaction(
        partial(_claim, statuses=_RESOLVE_STATUSES, now_us=now, policy=policy, worker=worker_id)
    )
    rng = random.Random()
    for item in claimed:
        resolve_one(database, processor, policy, item, worker_id, rng)
    return len(claimed)


def resolve_one(
    database: Database,
    processor: Processor,
    policy: ResolverPolicy,
    item: Claimed,
    worker_id: str,
    rng: random.Random,
) -> None:
    made = [calls.get_refund(processor, item.refund.processor_request_id)]
    if made[0].evidence.kind == "not_found" and item.request is not None:
        made.append(calls.refund(processor, item.request))  # same request id: deduped by the processor
    database.transaction(partial(_apply_resolution, item=item, made=made, policy=policy, worker_id=worker_id, rng=rng))


def _claim(
    connection: Connection, *, statuses: tuple[str, ...], now_us: int, policy: ResolverPolicy, worker: str
) -> list[Claimed]:
    rows = repository.claim_due(
        connection,
        statuses=statuses,
        now_us=now_us,
        worker_id=worker,
        lease_until_us=now_us + policy.lease_ms * 1000,
        limit=policy.batch_max,
    )
    claimed = []
    for row in rows:
        refund = refund_from_row(row)
        payment = charges.get(connection, refund.tenant_id, refund.payment_id)
        assert payment is not None, "a refund belongs to a stored payment"
        reference = payment.processor_reference
        claimed.append(Claimed(refund, calls.refund_request(refund, reference) if reference else None))
    return claimed


def _start_all(connection: Connection, *, claimed: list[Claimed], now_us: int, worker_id: str) -> list[Claimed]:
    """In the claim transaction, mark each claimed refund as sent (`processing`) before any
    call is made. A refund of a payment without a processor reference cannot be sent at all:
    nothing was ever sent for it, so failing it (its amount released) is a fact, not a guess."""
    started = []
    for item in claimed:
        current = item.refund
        assert current.status == states.PENDING and current.claimed_by == worker_id, "claimed in this transaction"
        if item.request is None:
            service.apply(
                connection,
                current,
                states.FAILED,
                cause="not_sendable",
                actor=worker_id,
                now_us=now_us,
                failure_code=NOT_SENDABLE_CODE,
            )
            continue
        moved = service.apply(connection, current, states.PROCESSING, cause="sent", actor=worker_id, now_us=now_us)
        assert moved.changed, "the refund is pending and row-locked in this transaction"
        started.append(Claimed(moved.refund, item.request))
    return started


def _finish_send(
    connection: Connection,
    *,
    sent: Refund,
    call: calls.Call,
    policy: ResolverPolicy,
    worker_id: str,
    rng: random.Random,
) -> None:
    now = clock_now_us()
    current = service.load(connection, sent.tenant_id, sent.id, for_update=True)
    calls.record(connection, current, call, actor=worker_id, now_us=now)
    if current.claimed_by != worker_id:
        # Our lease lapsed and another worker holds the refund (or a webhook settled it):
        # apply the evidence (a compare-and-set, harmless twice), leave the schedule alone.
        evidence.apply(connection, current, call.evidence, cause="processor_answer", actor=worker_id, now_us=now)
        return
    # No answer (in_doubt) or `pending`: the resolver asks soon; a webhook may come first.
    schedule = {
        "next_attempt_at_us": now + backoff_ms(1, policy, rng) * 1000,
        "claimed_by": None,
        "claimed_until_us": None,
    }
    applied = evidence.apply(
        connection, current, call.evidence, cause="processor_answer", actor=worker_id, now_us=now, schedule=schedule
    )
    if not applied.changed and applied.refund.status in states.UNRESOLVED:
        repository.set_values(connection, current.tenant_id, current.id, schedule)


def _apply_resolution(
    connection: Connection,
    *,
    item: Claimed,
    made: list[calls.Call],
    policy: ResolverPolicy,
    worker_id: str,
    rng: random.Random,
) -> None:
    now = clock_now_us()
    current = service.load(connection, item.refund.tenant_id, item.refund.id, for_update=True)
    for call in made:
        calls.record(connection, current, call, actor=worker_id, now_us=now)
    learned = made[-1].evidence
    if current.claimed_by != worker_id:
        evidence.apply(connection, current, learned, cause="resolver", actor=worker_id, now_us=now)
        return
    attempts = current.resolve_attempts + 1
    due = None if attempts >= policy.attempts_max else now + backoff_ms(attempts, policy, rng) * 1000
    schedule = {"resolve_attempts": attempts, "next_attempt_at_us": due, "claimed_by": None, "claimed_until_us": None}
    applied = evidence.apply(
        connection, current, learned, cause="resolver", actor=worker_id, now_us=now, schedule=schedule
    )
    if applied.changed or applied.refund.status not in states.UNRESOLVED:
        return
    repository.set_values(connection, current.tenant_id, current.id, schedule)
    if due is None and applied.refund.status == states.PROCESSING:
        # Out of attempts with the processor still saying `pending` (or a mismatch): make it
        # visible in the in-doubt queue for a person rather than leave it quietly processing.
        service.apply(
            connection, applied.refund, states.IN_DOUBT, cause="attempts_exhausted", actor=worker_id, now_us=now
        )
