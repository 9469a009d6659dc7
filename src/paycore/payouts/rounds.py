"""The worker side of payouts (SPEC §11), on the one worker round (`paycore.in_doubt.resolver`):
queue due payouts, send them, follow them until the bank's answer is final. The calls to the
bank they make: `processor_calls`.

- `queue_due`: scheduled payouts whose execute_on day has come move to `queued`.
- `send_due`: claims queued payouts in bounded batches and moves each to `processing` in the
  claim transaction, by the same compare-and-set on the status that cancel uses: exactly one
  of the two wins. Then it sends the payout with its id as the bank's dedupe key and applies
  the answer: accepted -> `sent`, refused -> `failed`, no answer -> `in_doubt`.
- `resolve_due`: takes `processing` payouts whose lease lapsed (a worker died), `in_doubt`
  ones, and `sent` ones awaiting settlement; asks the bank for the payout's status and, only
  when the bank has no record of it, sends the *same* request again. Never guesses. Sent
  payouts are asked about until they settle (webhooks usually come first), never given up.

The bank's `accepted` or `rejected` (to a send or a status query) for a payout still
`processing` or `in_doubt` is written by the payout's settle phase on the data plane
(`settle.ROUND`, ADR 0026), as the bank's webhook writes it; every other answer by the payout's
machine (`lifecycle.apply_evidence`).

A payout a round cannot move is left as it is on its fault and the round goes on with the
others (`paycore.lifecycle.faults`).
"""

from __future__ import annotations

import random
from functools import partial
from typing import cast

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.in_doubt import resolver
from paycore.kit import actors
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import utc_day
from paycore.lifecycle import faults
from paycore.lifecycle.policy import Policy
from paycore.payouts import lifecycle, repository, settle, states
from paycore.payouts.processor_calls import get, payout_request, send
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutRequest, Processor

_AWAITING_BANK = (states.PROCESSING, states.IN_DOUBT, states.SENT)


def job(processor: Processor) -> resolver.Job[Payout, PayoutRequest]:
    return resolver.Job(
        machine=lifecycle.MACHINE,
        build=_build,
        send=lambda _payout, request: send(processor, request),
        ask=lambda payout: get(processor, payout.id),
        polled=frozenset({states.SENT}),
        sends_first=True,
        send_cause="claimed",
        answer_cause="bank_answer",
        ask_cause="bank_answer",
        apply=lifecycle.apply_evidence,
        settle=settle.ROUND,
    )


def queue_due(database: Database, batch_max: int, *, actor: str, policy: Policy | None = None) -> int:
    """scheduled -> queued for up to `batch_max` payouts whose day (UTC) has come. A payout that
    cannot be moved is left `scheduled` on its fault (`lifecycle.faults`), tried again after
    `policy`'s backoff (without one: when a person says so), and the others are queued."""
    return faults.transaction(database, partial(_queue, batch_max=batch_max, actor=actor, policy=policy))


def _queue(
    connection: Connection, *, batch_max: int, actor: str, policy: Policy | None, isolation: faults.Isolation
) -> int:
    now = clock_now_us()
    due = repository.due(
        connection, status=states.SCHEDULED, execute_on_max=utc_day(now).isoformat(), now_us=now, limit=batch_max
    )
    rng = random.Random()
    for payout in due:
        values = {"next_attempt_at_us": now}
        move = partial(
            lifecycle.MACHINE.move,
            connection,
            payout,
            states.QUEUED,
            cause="due",
            actor=actor,
            now_us=now,
            values=values,
        )
        moved = isolation.run(
            connection, move, about={"kind": "payout", "payout_id": payout.id, "tenant_id": payout.tenant_id}
        )
        if isinstance(moved, faults.Fault):
            job = actors.worker_job(actor) or actor
            faults.left(
                connection, lifecycle.MACHINE, payout, moved, job=job, actor=actor, now_us=now, policy=policy, rng=rng
            )
    return len(due)


def send_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim queued payouts and send each. Returns how many were claimed."""
    return resolver.send_due(database, job(processor), policy, worker_id, actor=actor, ready=(states.QUEUED,))


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: ask the bank about payouts without a final answer."""
    return resolver.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=_AWAITING_BANK)


def claim_queued(connection: Connection, *, policy: Policy, worker_id: str, actor: str) -> list[Payout]:
    """The send round's claim alone, in the caller's transaction: queued -> processing (the
    compare-and-set a cancel races). It makes no call: the job needs no processor."""
    _, started = resolver.claim_and_start(
        connection, job=job(cast(Processor, None)), policy=policy, worker=worker_id, actor=actor, ready=(states.QUEUED,)
    )
    return [entry.item for entry in started]


def _build(connection: Connection, payout: Payout) -> PayoutRequest:
    return payout_request(payout)
