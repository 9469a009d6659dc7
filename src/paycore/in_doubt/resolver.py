"""The resolver: one round of a worker, the same for every kind of item (SPEC §10; docs/adr/0006):
commit, call, commit. No call to another system ever runs inside a database transaction.

1. Claim (one short transaction): due items with a lease (`claimed_by`, `claimed_until_us`;
   FOR UPDATE SKIP LOCKED on PostgreSQL), in a bounded batch. A send round also moves each
   item to its sending state there, by the compare-and-set a cancel uses: one of the two wins,
   and an item is marked as sent before any call can have been made.
2. Call, with no transaction open: a send round sends the item's one request (same request
   id every time: the other system dedupes); an ask round asks for the item's status and,
   only when the other system has no record of it, sends the same request again.
3. Apply (one transaction per item): every call is recorded as an attempt with its round's
   number; the last call's evidence moves the item through its machine (a plain final answer
   through its domain's settle phase on the data plane, where the job has one: `Job.settle`,
   `in_doubt.plane`); the next round is scheduled with backoff and jitter. After
   `attempts_max` asking rounds without an answer an item is left to a person (`in_doubt`,
   unscheduled), never guessed.

A worker killed at any point leaves a lease that lapses; the item is then taken again by an
ask round, which asks before it re-sends. If a lease lapsed while its holder was calling, the
holder still applies what it learned (a compare-and-set, harmless twice) but leaves the
schedule to the new holder.

An item the round cannot move (its request cannot be built, its move or the evidence's ledger
effect raises: `lifecycle.faults`) is left in its state with its money where it was: the calls
made for it are recorded, its fault too (`fault_code`, a `<object>.faulted` note, the metric),
and its next round is backed off, or never once its rounds ran out: a person takes it from the
console. The round goes on with the other items.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us as clock_now_us
from paycore.lifecycle import calls, faults, store
from paycore.lifecycle.columns import (
    ATTEMPTS,
    CLAIMED_BY,
    CLAIMED_UNTIL_US,
    NEXT_ATTEMPT_AT_US,
    NO_FAULT,
)
from paycore.lifecycle.evidence import Applied, Evidence
from paycore.lifecycle.faults import Fault, Isolation
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
    # The data plane's apply (ADR 0026): evidence in its plain case (a final answer for an item
    # where the domain's settle phase takes it) written by that phase; None, having written
    # nothing, where `apply` decides. Raises (rolled back, the item's round run again careful,
    # with `apply`) where the phase refused having written part of the move.
    settle: Callable[..., Applied[T] | None] | None = None

    def applied(
        self, connection: Connection, item: T, evidence: Evidence[Any], *, plane: bool = False, **kwargs: Any
    ) -> Applied[T]:
        """`evidence` applied to `item` (loaded, row-locked): by the settle phase where `plane`
        and it takes it, else by the reference path (`apply`, or the machine)."""
        if plane and self.settle is not None:
            settled = self.settle(connection, item, evidence, **kwargs)
            if settled is not None:
                return settled
        if self.apply is not None:
            return self.apply(connection, item, evidence, **kwargs)
        return self.machine.apply_evidence(connection, item, evidence, **kwargs)


@dataclass(frozen=True)
class _Claimed(Generic[T, Q]):
    item: T
    request: Q | None


@dataclass(frozen=True)
class _Round(Generic[T, Q]):
    """One round's fixed parts: the job, its policy, the lease holder and the audit's actor."""

    job: Job[T, Q]
    policy: Policy
    worker: str  # holds the leases
    actor: str  # `worker:JOB`: who the audit log says acted
    rng: random.Random


def send_due(
    database: Database, job: Job[T, Q], policy: Policy, worker_id: str, *, actor: str, ready: Collection[str]
) -> int:
    """One bounded send round over items in `ready`. Returns how many were claimed. `worker_id`
    holds the leases; `actor` (`worker:JOB`) is who the audit log says acted."""
    claim = partial(claim_and_start, job=job, policy=policy, worker=worker_id, actor=actor, ready=ready)
    claimed, started = faults.transaction(database, claim)
    round_ = _Round(job, policy, worker_id, actor, random.Random())
    for entry in started:
        assert entry.request is not None
        made = faults.caught(partial(_send, job, entry), about=_about(job, entry.item))
        faults.transaction(
            database, partial(_finish, round_=round_, claimed=entry.item, made=made, cause=job.answer_cause)
        )
    return claimed


def resolve_due(
    database: Database, job: Job[T, Q], policy: Policy, worker_id: str, *, actor: str, statuses: Collection[str]
) -> int:
    """One bounded ask round over items in `statuses`. Returns how many were claimed."""
    round_ = _Round(job, policy, worker_id, actor, random.Random())
    claimed = faults.transaction(database, partial(_claim, round_=round_, statuses=statuses))
    for entry in claimed:
        made = faults.caught(partial(_ask, job, entry), about=_about(job, entry.item))
        faults.transaction(
            database, partial(_finish, round_=round_, claimed=entry.item, made=made, cause=job.ask_cause)
        )
    return len(claimed)


def _send(job: Job[T, Q], entry: _Claimed[T, Q]) -> list[calls.Call[Any]]:
    assert entry.request is not None
    return [job.send(entry.item, entry.request)]


def _ask(job: Job[T, Q], entry: _Claimed[T, Q]) -> list[calls.Call[Any]]:
    made = [job.ask(entry.item)]
    if made[0].kind == "not_found" and entry.item.status in job.resend_in and entry.request is not None:
        made.append(job.send(entry.item, entry.request))  # same request id: deduped by the other side
    return made


def _claim(
    connection: Connection,
    *,
    round_: _Round[T, Q],
    statuses: Collection[str],
    mark: bool = True,
    isolation: Isolation,
) -> list[_Claimed[T, Q]]:
    job, policy = round_.job, round_.policy
    now = clock_now_us()
    rows = store.claim_due(
        connection,
        job.machine.table,
        statuses=job.machine.spellings(statuses),
        now_us=now,
        worker_id=round_.worker,
        lease_until_us=now + policy.lease_ms * 1000,
        limit=policy.batch_max,
        mark=mark,
    )
    claimed = []
    for row in rows:
        built = isolation.run(connection, partial(_built, connection, job, row), about=_row_ids(job, row))
        if isinstance(built, Fault):
            _fault(connection, round_, row, built, now_us=now, schedule=True)
        else:
            claimed.append(built)
    return claimed


def _built(connection: Connection, job: Job[T, Q], row: dict[str, Any]) -> _Claimed[T, Q]:
    item = job.machine.from_row(row)
    return _Claimed(item, job.build(connection, item))


def claim_and_start(
    connection: Connection,
    *,
    job: Job[T, Q],
    policy: Policy,
    worker: str,
    actor: str,
    ready: Collection[str],
    isolation: Isolation | None = None,
) -> tuple[int, list[_Claimed[T, Q]]]:
    """Claim, and move each claimed item to `sending` before any call is made."""
    isolation = isolation or Isolation()
    round_ = _Round(job, policy, worker, actor, random.Random())
    now = clock_now_us()
    claimed = _claim(connection, round_=round_, statuses=ready, mark=False, isolation=isolation)
    started = []
    for entry in claimed:
        moved = isolation.run(
            connection, partial(_start, connection, round_, entry, now), about=_about(job, entry.item)
        )
        if isinstance(moved, Fault):
            _fault(connection, round_, entry.item, moved, now_us=now, schedule=True)
        elif moved is not None:
            started.append(moved)
    return len(claimed), started


def _start(connection: Connection, round_: _Round[T, Q], entry: _Claimed[T, Q], now: int) -> _Claimed[T, Q] | None:
    """`entry` moved to `sending`, with the lease; None when it cannot be sent (failed: nothing
    was ever sent) or was canceled between the claim's read and this update (the cancel won)."""
    job = round_.job
    if entry.request is None:
        assert job.unsendable is not None, "only a job with an unsendable rule builds no request"
        job.unsendable(connection, entry.item, round_.actor, now)
        return None
    # The lease, set with the move; due again when it lapses: an ask round then takes a send
    # its worker never finished.
    lease_until_us = now + round_.policy.lease_ms * 1000
    values = {CLAIMED_BY: round_.worker, CLAIMED_UNTIL_US: lease_until_us, NEXT_ATTEMPT_AT_US: lease_until_us}
    moved = job.machine.move(
        connection, entry.item, job.sending, cause=job.send_cause, actor=round_.actor, now_us=now, values=values
    )
    return _Claimed(moved.item, entry.request) if moved.changed else None


def _finish(
    connection: Connection,
    *,
    round_: _Round[T, Q],
    claimed: T,
    made: list[calls.Call[Any]] | Fault,
    cause: str,
    isolation: Isolation,
) -> None:
    job, machine = round_.job, round_.job.machine
    now = clock_now_us()
    current = machine.load(connection, claimed.tenant_id, claimed.id, for_update=True)
    attempt = int(getattr(current, ATTEMPTS)) + 1
    holder = getattr(current, CLAIMED_BY) == round_.worker
    if isinstance(made, Fault):  # no call was made: nothing to record but the fault
        _fault(connection, round_, current, made, now_us=now, schedule=holder)
        return
    for call in made:
        calls.record(
            connection,
            current.tenant_id,
            object_type=machine.object_type,
            object_id=current.id,
            call=call,
            attempt=attempt,
            actor=round_.actor,
            now_us=now,
        )
    evidence = made[-1].evidence
    # The settle phase only in the first run: a careful one (an item's part raised) is the
    # reference path's, with its own faults.
    apply = partial(
        _apply,
        connection,
        round_,
        current,
        evidence,
        attempt=attempt,
        holder=holder,
        cause=cause,
        now=now,
        plane=not isolation.careful,
    )
    applied = isolation.run(connection, apply, about=_about(job, current))
    if isinstance(applied, Fault):  # the calls stay recorded; the item stays as it was
        _fault(connection, round_, current, applied, now_us=now, schedule=holder)


def _apply(
    connection: Connection,
    round_: _Round[T, Q],
    current: T,
    evidence: Evidence[Any],
    *,
    attempt: int,
    holder: bool,
    cause: str,
    now: int,
    plane: bool,
) -> None:
    """The round's evidence applied to `current` (loaded, row-locked) and its next round set;
    with `plane`, a plain answer by the domain's settle phase (`Job.settle`)."""
    job, machine, actor, policy = round_.job, round_.job.machine, round_.actor, round_.policy
    if not holder:
        # Our lease lapsed and another worker holds the item (or evidence settled it): apply
        # what we learned, leave the schedule to the holder.
        job.applied(connection, current, evidence, plane=plane, cause=cause, actor=actor, now_us=now)
        return
    asked = attempt - (1 if job.sends_first else 0)  # rounds that asked; 0: this was the send
    if asked == 0:
        due = next_attempt_at_us(1, policy, round_.rng, now_us=now, give_up=False)  # the first ask
    else:
        due = next_attempt_at_us(asked, policy, round_.rng, now_us=now, give_up=current.status not in job.polled)
    schedule = {ATTEMPTS: attempt, NEXT_ATTEMPT_AT_US: due, CLAIMED_BY: None, CLAIMED_UNTIL_US: None, **NO_FAULT}
    applied = job.applied(
        connection, current, evidence, plane=plane, cause=cause, actor=actor, now_us=now, values=schedule
    )
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


def _fault(
    connection: Connection, round_: _Round[T, Q], item: Any, fault: Fault, *, now_us: int, schedule: bool
) -> None:
    """`item` (a claimed row or a loaded item) left on `fault` by this round (`faults.left`):
    with `schedule` (this round holds it), its round counted and its next one backed off."""
    policy = round_.policy if schedule else None
    job = actors.worker_job(round_.actor) or round_.actor
    faults.left(
        connection,
        round_.job.machine,
        item,
        fault,
        job=job,
        actor=round_.actor,
        now_us=now_us,
        policy=policy,
        rng=round_.rng,
    )


def _about(job: Job[T, Q], item: T) -> dict[str, str]:
    kind = job.machine.object_type
    return {"kind": kind, f"{kind}_id": item.id, "tenant_id": item.tenant_id}


def _row_ids(job: Job[T, Q], row: dict[str, Any]) -> dict[str, str]:
    kind = job.machine.object_type
    return {"kind": kind, f"{kind}_id": str(row["id"]), "tenant_id": str(row["tenant_id"])}
