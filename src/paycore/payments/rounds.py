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
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.in_doubt import resolver
from paycore.lifecycle.policy import Policy
from paycore.payments import lifecycle, states
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
    )


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due unresolved payments, resolve each. Returns how many were claimed."""
    return resolver.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=states.UNRESOLVED)


def _build(connection: Connection, payment: Payment) -> ChargeRequest:
    return charge_request(payment)
