"""The worker side of payouts (SPEC §11): queue due payouts, send them, follow them until the
bank's answer is final. Commit, call, commit (docs/adr/0006): no bank call ever runs inside
a database transaction.

- `queue_due`: scheduled payouts whose execute_on day has come move to `queued`.
- `send_due`: claims queued payouts in bounded batches (FOR UPDATE SKIP LOCKED on
  PostgreSQL) and moves each to `processing` in the claim transaction, by the same
  compare-and-set on the status that cancel uses: exactly one of the two wins. Then it sends
  the payout with its id as the bank's dedupe key and applies the answer: accepted -> `sent`,
  refused -> `failed`, no answer -> `in_doubt`.
- `resolve_due`: claims `processing` payouts whose lease lapsed (a worker died), `in_doubt`
  ones, and `sent` ones awaiting settlement; asks the bank for the payout's status and, only
  when the bank has no record of it, sends the *same* request again. Never guesses.

Every call is an attempt recorded in the audit log (number, request, answer or error,
latency). A worker killed at any point leaves a lease that lapses; nothing is sent twice
because the resolver asks before it re-sends and the bank dedupes on the payout's id.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us as clock_now_us
from paycore.payments.resolver import ResolverPolicy, backoff_ms
from paycore.payouts import calls, evidence, repository, states, transitions
from paycore.payouts.service import utc_day
from paycore.payouts.types import Payout
from paycore.processor.port import Processor

_RESOLVE_STATUSES = (states.PROCESSING, states.IN_DOUBT, states.SENT)


@dataclass(frozen=True)
class Finish:
    policy: ResolverPolicy
    worker_id: str
    rng: random.Random


def queue_due(database: Database, batch_max: int) -> int:
    """scheduled -> queued for up to `batch_max` payouts whose day (UTC) has come."""

    def work(connection: Connection) -> int:
        now = clock_now_us()
        keys = repository.due_keys(
            connection, status=states.SCHEDULED, execute_on_max=utc_day(now).isoformat(), limit=batch_max
        )
        for key in keys:
            payout = transitions.load(connection, key.tenant_id, key.id)
            values = {"next_attempt_at_us": now}
            transitions.move(connection, payout, states.QUEUED, cause="due", actor="worker", now_us=now, values=values)
        return len(keys)

    return database.transaction(work)


def send_due(database: Database, processor: Processor, policy: ResolverPolicy, worker_id: str) -> int:
    """One bounded round: claim queued payouts and send each. Returns how many were claimed."""
    claimed = database.transaction(partial(_claim_queued, policy=policy, worker_id=worker_id))
    finish = Finish(policy, worker_id, random.Random())
    for payout in claimed:
        call = calls.send(processor, calls.payout_request(payout))
        database.transaction(partial(_finish, claimed=payout, made=[call], finish=finish))
    return len(claimed)


def resolve_due(database: Database, processor: Processor, policy: ResolverPolicy, worker_id: str) -> int:
    """One bounded round: ask the bank about payouts without a final answer."""
    claimed = database.transaction(partial(_claim_unresolved, policy=policy, worker_id=worker_id))
    finish = Finish(policy, worker_id, random.Random())
    for payout in claimed:
        made = [calls.get(processor, payout.id)]
        if made[0].answer.kind == "not_found" and payout.status in (states.PROCESSING, states.IN_DOUBT):
            made.append(calls.send(processor, calls.payout_request(payout)))  # same id: the bank dedupes
        database.transaction(partial(_finish, claimed=payout, made=made, finish=finish))
    return len(claimed)


def _claim_queued(connection: Connection, *, policy: ResolverPolicy, worker_id: str) -> list[Payout]:
    now = clock_now_us()
    keys = repository.claimable_keys(connection, statuses=(states.QUEUED,), now_us=now, limit=policy.batch_max)
    claimed = []
    for key in keys:
        payout = transitions.load(connection, key.tenant_id, key.id)
        lease = now + policy.lease_ms * 1000
        values = {"claimed_by": worker_id, "claimed_until_us": lease, "next_attempt_at_us": lease}
        moved = transitions.move(
            connection, payout, states.PROCESSING, cause="claimed", actor=worker_id, now_us=now, values=values
        )
        if moved.changed:  # else canceled between our read and our update: cancel won
            claimed.append(moved.payout)
    return claimed


def _claim_unresolved(connection: Connection, *, policy: ResolverPolicy, worker_id: str) -> list[Payout]:
    now = clock_now_us()
    keys = repository.claimable_keys(connection, statuses=_RESOLVE_STATUSES, now_us=now, limit=policy.batch_max)
    claimed = []
    for key in keys:
        lease = now + policy.lease_ms * 1000
        repository.set_values(connection, key.tenant_id, key.id, {"claimed_by": worker_id, "claimed_until_us": lease})
        claimed.append(transitions.load(connection, key.tenant_id, key.id))
    return claimed


def _finish(connection: Connection, *, claimed: Payout, made: list[calls.Call], finish: Finish) -> None:
    """Record the calls as attempts and apply what the last one established."""
    now = clock_now_us()
    current = transitions.load(connection, claimed.tenant_id, claimed.id, for_update=True)
    attempts = current.attempts
    for call in made:
        attempts += 1
        calls.record(connection, current, call, attempt=attempts, actor=finish.worker_id, now_us=now)
    repository.set_values(connection, current.tenant_id, current.id, {"attempts": attempts})
    current = dataclasses.replace(current, attempts=attempts)
    current = _apply(connection, current, made[-1], actor=finish.worker_id, now_us=now)
    if current.claimed_by != finish.worker_id or current.status not in states.AWAITING_BANK:
        return  # final, or our lease lapsed and another worker holds it: leave its schedule alone
    repository.set_values(connection, current.tenant_id, current.id, _schedule(current, attempts, now, finish))


def _apply(connection: Connection, payout: Payout, call: calls.Call, *, actor: str, now_us: int) -> Payout:
    answer = call.answer
    if answer.kind == "result":
        assert answer.result is not None
        return evidence.apply(connection, payout, answer.result, cause="bank_answer", actor=actor, now_us=now_us)[0]
    if answer.kind == "refused" and call.operation == "send_payout":
        values = {"failure_code": answer.refusal_code or "bank_refused"}
        return transitions.move(
            connection, payout, states.FAILED, cause="bank_refused", actor=actor, now_us=now_us, values=values
        ).payout
    if answer.kind == "unreachable" and payout.status == states.PROCESSING:
        return transitions.move(
            connection, payout, states.IN_DOUBT, cause="no_answer", actor=actor, now_us=now_us
        ).payout
    return payout  # not found yet, or unreachable again: ask later


def _schedule(payout: Payout, attempts: int, now_us: int, finish: Finish) -> dict[str, Any]:
    """When to ask the bank next. In doubt past attempts_max: left for a person (the in-doubt
    gauges of /metrics), never guessed. Sent payouts are polled until settled (webhooks
    usually come first), with the same capped backoff."""
    exhausted = payout.status != states.SENT and attempts >= finish.policy.attempts_max
    due = None if exhausted else now_us + backoff_ms(attempts, finish.policy, finish.rng) * 1000
    return {"next_attempt_at_us": due, "claimed_by": None, "claimed_until_us": None}
