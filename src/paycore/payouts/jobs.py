"""The worker side of payouts (SPEC §11), on the one lifecycle (`paycore.lifecycle.work`):
queue due payouts, send them, follow them until the bank's answer is final.

- `queue_due`: scheduled payouts whose execute_on day has come move to `queued`.
- `send_due`: claims queued payouts in bounded batches and moves each to `processing` in the
  claim transaction, by the same compare-and-set on the status that cancel uses: exactly one
  of the two wins. Then it sends the payout with its id as the bank's dedupe key and applies
  the answer: accepted -> `sent`, refused -> `failed`, no answer -> `in_doubt`.
- `resolve_due`: takes `processing` payouts whose lease lapsed (a worker died), `in_doubt`
  ones, and `sent` ones awaiting settlement; asks the bank for the payout's status and, only
  when the bank has no record of it, sends the *same* request again. Never guesses. Sent
  payouts are asked about until they settle (webhooks usually come first), never given up.

A payout a round cannot move is left as it is on its fault and the round goes on with the
others (`paycore.lifecycle.faults`).
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial
from typing import cast

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import utc_day
from paycore.lifecycle import faults, work
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.policy import Policy
from paycore.payouts import lifecycle, repository, states
from paycore.payouts.lifecycle import SEND_OPERATION
from paycore.payouts.types import Payout
from paycore.payouts.validation import mask
from paycore.processor.port import PayoutRequest, PayoutResult, Processor

_MASKED = ("iban", "account_number")
_AWAITING_BANK = (states.PROCESSING, states.IN_DOUBT, states.SENT)


def payout_request(payout: Payout) -> PayoutRequest:
    """The one request sent for this payout, every time: its id is the bank's dedupe key."""
    return PayoutRequest(
        request_id=payout.id,
        merchant_id=payout.tenant_id,
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        rail="ach" if payout.rail == "ach" else "sepa",
        beneficiary_name=payout.beneficiary_name,
        iban=payout.iban,
        bic=payout.bic,
        routing_number=payout.routing_number,
        account_number=payout.account_number,
    )


def send(processor: Processor, request: PayoutRequest) -> Call[PayoutResult]:
    recorded = dataclasses.asdict(request)
    for name in _MASKED:
        recorded[name] = mask(recorded[name])
    ids = {"payout_id": request.request_id, "tenant_id": request.merchant_id}  # never the account fields
    return timed(SEND_OPERATION, recorded, lambda: processor.send_payout(request), ids=ids)


def get(processor: Processor, request_id: str) -> Call[PayoutResult]:
    ids = {"payout_id": request_id}
    return timed("get_payout", {"request_id": request_id}, lambda: processor.get_payout(request_id), ids=ids)


def job(processor: Processor) -> work.Job[Payout, PayoutRequest]:
    return work.Job(
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
    return work.send_due(database, job(processor), policy, worker_id, actor=actor, ready=(states.QUEUED,))


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: ask the bank about payouts without a final answer."""
    return work.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=_AWAITING_BANK)


def claim_queued(connection: Connection, *, policy: Policy, worker_id: str, actor: str) -> list[Payout]:
    """The send round's claim alone, in the caller's transaction: queued -> processing (the
    compare-and-set a cancel races). It makes no call: the job needs no processor."""
    _, started = work.claim_and_start(
        connection, job=job(cast(Processor, None)), policy=policy, worker=worker_id, actor=actor, ready=(states.QUEUED,)
    )
    return [entry.item for entry in started]


def _build(connection: Connection, payout: Payout) -> PayoutRequest:
    return payout_request(payout)
