"""The resolver's round over payments (SPEC §10), on the one worker round
(`paycore.in_doubt.resolver`).

The API request makes the first call (`charge`, in `service.create_payment`). The resolver
then takes every payment left without a final answer (`processing` past its stale time,
`in_doubt`), asks `get_charge(request_id)` and, only when the processor has no record of it,
sends the same request again (same request id, same parameters: the processor dedupes, so a
request lost on the way is retried and a charge is never made twice). After `attempts_max`
rounds without an answer the payment stays `in_doubt`, unscheduled, for a person: it shows in
`GET /v1/payments?status=in_doubt` and in `paycore_in_doubt_oldest_age_seconds`. The calls
themselves: `processor_calls`.

The processor's `succeeded` or `failed` (to the status query, or to the send again) for an
automatic payment still `processing` or `in_doubt`, nothing else in flight, is written by the
payment's settle phase on the data plane (`settle.ROUND`, ADR 0026), as the processor's webhook
writes it; every other answer by the payment's machine (`lifecycle.apply_evidence`): an
authorization's, a capture's or a cancel's, `pending`, no answer, a refusal, a mismatch, a
payment `processing` whose creating request was never answered (the reference path writes the
answer with the move).
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.in_doubt import resolver
from paycore.lifecycle.policy import Policy
from paycore.payments import lifecycle, settle, states
from paycore.payments.processor_calls import ask, charge, charge_request
from paycore.payments.types import Payment
from paycore.processor.port import ChargeRequest, Processor


def job(processor: Processor) -> resolver.Job[Payment, ChargeRequest]:
    return resolver.Job(
        machine=lifecycle.MACHINE,
        build=_build,
        send=lambda payment, request: charge(processor, payment, request),
        ask=lambda payment: ask(processor, payment),
        apply=lifecycle.apply_evidence,
        settle=settle.ROUND,
    )


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due unresolved payments, resolve each. Returns how many were claimed."""
    return resolver.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=states.UNRESOLVED)


def _build(connection: Connection, payment: Payment) -> ChargeRequest:
    return charge_request(payment)
