"""The refund's worker rounds (SPEC §7.1, §8, §10), on the one worker round
(`paycore.in_doubt.resolver`); the calls they make: `processor_calls`.

`send_due` claims due `pending` refunds and moves each to `processing` in the claim
transaction, so a refund is marked as sent before any call can have been made; then it calls
`processor.refund` with the request id stored when the refund was created and applies the
answer: a result or a refusal settles the refund, `pending` leaves it `processing` for the
resolver, no answer makes it `in_doubt`. A refund of a payment without a processor reference
cannot be sent at all: nothing was ever sent for it, so it fails (its amount released).

A `succeeded` or `failed` answer (to a send or a status query) for a refund still `processing` or
`in_doubt` is written by the refund's settle phase on the data plane (`settle.ROUND`, ADR 0026),
as the processor's webhook writes it; every other answer by the refund's machine.

`resolve_due` claims due `processing` and `in_doubt` refunds, asks `get_refund(request_id)`
and, when the processor has no record of it, sends the *same* request again (the processor
dedupes on its id, so nothing is refunded twice). After `attempts_max` asking rounds the
refund stays `in_doubt`, unscheduled, for a person.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.in_doubt import resolver
from paycore.lifecycle.policy import Policy
from paycore.payments import service as payments
from paycore.processor.port import Processor, RefundRequest
from paycore.refunds import lifecycle, settle, states
from paycore.refunds.processor_calls import get_refund, refund, refund_request
from paycore.refunds.types import Refund

NOT_SENDABLE_CODE = "payment_reference_missing"


def job(processor: Processor) -> resolver.Job[Refund, RefundRequest]:
    return resolver.Job(
        machine=lifecycle.MACHINE,
        build=_build,
        send=lambda _refund, request: refund(processor, request),
        ask=lambda item: get_refund(processor, item.processor_request_id),
        sends_first=True,
        unsendable=_unsendable,
        settle=settle.ROUND,
    )


def send_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due `pending` refunds and send each. Returns how many were claimed."""
    return resolver.send_due(database, job(processor), policy, worker_id, actor=actor, ready=(states.PENDING,))


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due unresolved refunds, resolve each. Returns how many were claimed."""
    return resolver.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=states.UNRESOLVED)


def _build(connection: Connection, item: Refund) -> RefundRequest | None:
    payment = payments.MACHINE.find(connection, item.tenant_id, item.payment_id)
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
