"""The refund's calls to the processor and the worker's rounds (SPEC §7.1, §8, §10), on the
one lifecycle (`paycore.lifecycle.work`).

`send_due` claims due `pending` refunds and moves each to `processing` in the claim
transaction, so a refund is marked as sent before any call can have been made; then it calls
`processor.refund` with the request id stored when the refund was created and applies the
answer: a result or a refusal settles the refund, `pending` leaves it `processing` for the
resolver, no answer makes it `in_doubt`. A refund of a payment without a processor reference
cannot be sent at all: nothing was ever sent for it, so it fails (its amount released).

`resolve_due` claims due `processing` and `in_doubt` refunds, asks `get_refund(request_id)`
and, when the processor has no record of it, sends the *same* request again (the processor
dedupes on its id, so nothing is refunded twice). After `attempts_max` asking rounds the
refund stays `in_doubt`, unscheduled, for a person.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.lifecycle import work
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.policy import Policy
from paycore.payments import service as payments
from paycore.processor.port import Processor, RefundRequest, RefundResult
from paycore.refunds import lifecycle, states
from paycore.refunds.types import Refund

NOT_SENDABLE_CODE = "payment_reference_missing"


def refund_request(refund: Refund, payment_reference: str) -> RefundRequest:
    """The one request sent for this refund, every time: its request id was stored with it."""
    return RefundRequest(
        request_id=refund.processor_request_id,
        merchant_id=refund.tenant_id,
        payment_reference=payment_reference,
        amount_minor=refund.amount_minor,
        currency=refund.currency,
    )


def refund(processor: Processor, request: RefundRequest) -> Call[RefundResult]:
    ids = {"refund_id": request.request_id, "tenant_id": request.merchant_id}  # the request id is the refund's id
    return timed("refund", dataclasses.asdict(request), lambda: processor.refund(request), ids=ids)


def get_refund(processor: Processor, request_id: str) -> Call[RefundResult]:
    ids = {"refund_id": request_id}
    return timed("get_refund", {"request_id": request_id}, lambda: processor.get_refund(request_id), ids=ids)


def job(processor: Processor) -> work.Job[Refund, RefundRequest]:
    return work.Job(
        machine=lifecycle.MACHINE,
        build=_build,
        send=lambda _refund, request: refund(processor, request),
        ask=lambda item: get_refund(processor, item.processor_request_id),
        sends_first=True,
        unsendable=_unsendable,
    )


def send_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due `pending` refunds and send each. Returns how many were claimed."""
    return work.send_due(database, job(processor), policy, worker_id, actor=actor, ready=(states.PENDING,))


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due unresolved refunds, resolve each. Returns how many were claimed."""
    return work.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=states.UNRESOLVED)


def _build(connection: Connection, item: Refund) -> RefundRequest | None:
    payment = payments.find(connection, item.tenant_id, item.payment_id)
    assert payment is not None, "a refund belongs to a stored payment"
    reference = payment.processor_reference
    return refund_request(item, reference) if reference else None


def _unsendable(connection: Connection, item: Refund, actor: str, now_us: int) -> None:
    lifecycle.move(
        connection,
        item,
        states.FAILED,
        cause="not_sendable",
        actor=actor,
        now_us=now_us,
        failure_code=NOT_SENDABLE_CODE,
    )
