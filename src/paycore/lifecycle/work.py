"""One round of a worker, the same for every kind of item (SPEC §10; docs/adr/0006): commit,
call, commit. No call to another system ever runs inside a database transaction.

1. Claim (one short transaction): due items with a lease (`claimed_by`, `claimed_until_us`;
   FOR UPDATE SKIP LOCKED on PostgreSQL), in a bounded batch. A send round also moves each
   item to its sending state there, by the compare-and-set a cancel uses: one of the two wins,
   and an item is marked as sent before any call can have been made.
2. Call, with no transaction open: a send round sends the item's one request (same request
   id every time: the other system dedupes); an ask round asks for the item's status and,
   only when the other system has no record of it, sends the same request again.
3. Apply (one transaction per item): every call is recorded as an attempt with its round's
   number; the last call's evidence moves the item through its machine; the next round is
   scheduled with backoff and jitter. After `attempts_max` asking rounds without an answer an
   item is left to a person (`in_doubt`, unscheduled), never guessed.

A worker killed at any point leaves a lease that lapses; the item is then taken again by an
ask round, which asks before it re-sends. If a lease lapsed while its holder was calling, the
holder still applies what it learned (a compare-and-set, harmless twice) but leaves the
schedule to the new holder.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us as clock_now_us
from paycore.lifecycle import calls, store
from paycore.lifecycle.columns import ATTEMPTS, CLAIMED_BY, CLAIMED_UNTIL_US, NEXT_ATTEMPT_AT_US
from paycore.lifecycle.evidence import Applied, Evidence
from paycore.lifecycle.machine import Item, Machine, replaced
from paycore.lifecycle.policy import Policy, next_attempt_at_us

T = TypeVar("T", bound=Item)
Q = TypeVar("Q")


@dataclass(frozen=True)
class Job(Generic[T, Q]):
    """What a domain supplies so that workers can drive its items."""

    machine: Machine[T]
    # The item's one request, built in the claim transaction; None: it cannot be sent at all.
    build: Callable[[Connection, T], Q | None]
    send: Callable[[T, Q], calls.Call[Any]]  # the call that moves money
    ask: Callable[[T], calls.Call[Any]]  # the status query
    sending: str = "processing"  # the state of an item whose call may be in flight
    resend_in: frozenset[str] = frozenset({"processing", "in_doubt"})  # "no record" means: send again
    polled: frozenset[str] = frozenset()  # states asked about until they end, never given up
    sends_first: bool = False  # a send round precedes the asking rounds (not so for payments)
    send_cause: str = "sent"  # the audit cause of the move to `sending`
    answer_cause: str = "processor_answer"  # the cause of a change a send's answer makes
    ask_cause: str = "resolver"  # the cause of a change an ask round makes
    # Fail an item that cannot be sent (nothing was ever sent: a fact, not a guess).
    unsendable: Callable[[Connection, T, str, int], None] | None = None
    # Evidence applied by the item's domain (default: the machine's `decide`).
    apply: Callable[..., Applied[T]] | None = None

    def applied(self, connection: Connection, item: T, evidence: Evidence[Any], **kwargs: Any) -> Applied[T]:
        if self.apply is not None:
            return self.apply(connection, item, evidence, **kwargs)
        return self.machine.apply_evidence(connection, item, evidence, **kwargs)


@dataclass(frozen=True)
class _Claimed(Generic[T, Q]):
    item: T
    request: Q | None


def send_due(
    database: Database, job: Job[T, Q], policy: Policy, worker_id: str, *, actor: str, ready: Collection[str]
) -> int:
    """One bounded send round over items in `ready`. Returns how many were claimed. `worker_id`
    holds the leases; `actor` (`worker:JOB`) is who the audit log says acted."""
    claimed, started = database.transaction(
        partial(claim_and_start, job=job, policy=policy, worker=worker_id, actor=actor, ready=ready)
    )
    rng = random.Random()
    for item in started:
        assert item.request is not None
        made = [job.send(item.item, item.request)]
        database.transaction(
            partial(
                _finish,
                job=job,
                claimed=item.item,
                made=made,
                policy=policy,
                worker=worker_id,
                actor=actor,
                rng=rng,
                cause=job.answer_cause,
            )
        )
    return claimed


def resolve_due(
    database: Database, job: Job[T, Q], policy: Policy, worker_id: str, *, actor: str, statuses: Collection[str]
) -> int:
    """One bounded ask round over items in `statuses`. Returns how many were claimed."""
    claimed = database.transaction(partial(_claim, job=job, policy=policy, worker=worker_id, statuses=statuses))
    rng = random.Random()
    for item in claimed:
        made = [job.ask(item.item)]
        if made[0].kind == "not_found" and item.item.status in job.resend_in and item.request is not None:
            made.append(job.send(item.item, item.request))  # same request id: deduped by the other side
        database.transaction(
            partial(
                _finish,
                job=job,
                claimed=item.item,
                made=made,
                policy=policy,
                worker=worker_id,
                actor=actor,
                rng=rng,
                cause=job.ask_cause,
            )
        )
    return len(claimed)


def _claim(
    connection: Connection,
    *,
    job: Job[T, Q],
    policy: Policy,
    worker: str,
    statuses: Collection[str],
    mark: bool = True,
) -> list[_Claimed[T, Q]]:
    now = clock_now_us()
    rows = store.claim_due(
        connection,
        job.machine.table,
        statuses=job.machine.spellings(statuses),
        now_us=now,
        worker_id=worker,
        lease_until_us=now + policy.lease_ms * 1000,
        limit=policy.batch_max,
        mark=mark,
    )
    items = [job.machine.from_row(row) for row in rows]
    return [_Claimed(item, job.build(connection, item)) for item in items]


def claim_and_start(
    connection: Connection, *, job: Job[T, Q], policy: Policy, worker: str, actor: str, ready: Collection[str]
) -> tuple[int, list[_Claimed[T, Q]]]:
    """Claim, and move each claimed item to `sending` before any call is made."""
    now = clock_now_us()
    claimed = _claim(connection, job=job, policy=policy, worker=worker, statuses=ready, mark=False)
    lease_until_us = now + policy.lease_ms * 1000
    started = []
    for entry in claimed:
        if entry.request is None:
            assert job.unsendable is not None, "only a job with an unsendable rule builds no request"
            job.unsendable(connection, entry.item, actor, now)
            continue
        # The lease, set with the move; due again when it lapses: an ask round then takes a
        # send its worker never finished.
        values = {CLAIMED_BY: worker, CLAIMED_UNTIL_US: lease_until_us, NEXT_ATTEMPT_AT_US: lease_until_us}
        moved = job.machine.move(
            connection,
            entry.item,
            job.sending,
            cause=job.send_cause,
            actor=actor,
            now_us=now,
            values=values,
        )
        if moved.changed:  # else canceled between the claim's read and this update: the cancel won
            started.append(_Claimed(moved.item, entry.request))
    return len(claimed), started


def _finish(
    connection: Connection,
    *,
    job: Job[T, Q],
    claimed: T,
    made: list[calls.Call[Any]],
    policy: Policy,
    worker: str,
    actor: str,
    rng: random.Random,
    cause: str,
) -> None:
    machine = job.machine
    now = clock_now_us()
    current = machine.load(connection, claimed.tenant_id, claimed.id, for_update=True)
    attempt = int(getattr(current, ATTEMPTS)) + 1
    for call in made:
        calls.record(
            connection,
            current.tenant_id,
            object_type=machine.object_type,
            object_id=current.id,
            call=call,
            attempt=attempt,
            actor=actor,
            now_us=now,
        )
    evidence = made[-1].evidence
    if getattr(current, CLAIMED_BY) != worker:
        # Our lease lapsed and another worker holds the item (or evidence settled it): apply
        # what we learned, leave the schedule to the holder.
        job.applied(connection, current, evidence, cause=cause, actor=actor, now_us=now)
        return
    asked = attempt - (1 if job.sends_first else 0)  # rounds that asked; 0: this was the send
    if asked == 0:
        due = next_attempt_at_us(1, policy, rng, now_us=now, give_up=False)  # the first ask
    else:
        due = next_attempt_at_us(asked, policy, rng, now_us=now, give_up=current.status not in job.polled)
    schedule = {ATTEMPTS: attempt, NEXT_ATTEMPT_AT_US: due, CLAIMED_BY: None, CLAIMED_UNTIL_US: None}
    applied = job.applied(connection, current, evidence, cause=cause, actor=actor, now_us=now, values=schedule)
    if applied.changed or applied.item.status not in job.resend_in | job.polled:
        return  # moved (its schedule written with the move), or no longer the worker's
    store.set_values(connection, machine.table, current.tenant_id, current.id, schedule)
    if due is None and applied.item.status == job.sending:
        # Out of rounds with the other side still saying `pending` (or a mismatch): make it
        # visible in the in-doubt queue for a person rather than leave it quietly processing.
        machine.move(
            connection,
            replaced(applied.item, schedule),
            machine.in_doubt,
            cause="attempts_exhausted",
            actor=actor,
            now_us=now,
        )
