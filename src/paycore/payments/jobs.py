"""The payment's calls to the processor and the resolver's round (SPEC §10), on the one
lifecycle (`paycore.lifecycle.work`).

The API request makes the first call (`charge`, in `service.create_payment`). The resolver
then takes every payment left without a final answer (`processing` past its stale time,
`in_doubt`), asks `get_charge(request_id)` and, only when the processor has no record of it,
sends the same request again (same request id, same parameters: the processor dedupes, so a
request lost on the way is retried and a charge is never made twice). After `attempts_max`
rounds without an answer the payment stays `in_doubt`, unscheduled, for a person: it shows in
`GET /v1/payments?status=in_doubt` and in `paycore_in_doubt_oldest_age_seconds`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.lifecycle import work
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.policy import Policy
from paycore.payments import lifecycle, states
from paycore.payments.types import Payment
from paycore.processor.port import (
    CancelRequest,
    CaptureRequest,
    ChargeRequest,
    ChargeResult,
    Processor,
    charge_request_fields,
)


def charge_request(payment: Payment) -> ChargeRequest:
    """The one request sent for this payment, every time: its request id was stored with it."""
    return ChargeRequest(
        request_id=payment.processor_request_id,
        merchant_id=payment.tenant_id,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        token=payment.source_token,
        description=payment.description,
        capture="manual" if payment.is_manual else "automatic",
    )


def charge(processor: Processor, payment: Payment, request: ChargeRequest | None = None) -> Call[ChargeResult]:
    request = request or charge_request(payment)
    fields = charge_request_fields(request)
    fields["token_last4"] = fields.pop("token")[-4:]  # the token itself stays out of the log
    return timed("charge", fields, lambda: processor.charge(request), ids=_ids(payment))


def get_charge(processor: Processor, payment: Payment) -> Call[ChargeResult]:
    request_id = payment.processor_request_id
    return timed("get_charge", {"request_id": request_id}, lambda: processor.get_charge(request_id), ids=_ids(payment))


def operation_request_id(payment: Payment) -> str:
    """The request id of the payment's capture or cancel: stable, one of each per payment."""
    assert payment.operation in (states.CAPTURE, states.CANCEL), payment
    return f"{payment.processor_request_id}_{payment.operation}"


def send_operation(processor: Processor, payment: Payment) -> Call[ChargeResult]:
    """The payment's capture or cancel (`Payment.operation`), the same request every time."""
    assert payment.processor_reference is not None, "an authorization has the processor's charge id"
    request_id, reference = operation_request_id(payment), payment.processor_reference
    if payment.operation == states.CAPTURE:
        assert payment.capture_requested_minor is not None
        capture = CaptureRequest(
            request_id, payment.tenant_id, reference, payment.capture_requested_minor, payment.currency
        )
        fields = {"request_id": request_id, "payment_reference": reference, "amount_minor": capture.amount_minor}
        return timed("capture", fields, lambda: processor.capture(capture), ids=_ids(payment))
    cancel = CancelRequest(request_id, payment.tenant_id, reference)
    fields = {"request_id": request_id, "payment_reference": reference}
    return timed("cancel", fields, lambda: processor.cancel(cancel), ids=_ids(payment))


def ask(processor: Processor, payment: Payment) -> Call[ChargeResult]:
    """The resolver's question: the charge's status. For a capture or cancel in flight whose
    charge the processor still shows authorized, the call has not arrived: the same request is
    sent again (deduped by its request id), and its answer is the round's evidence."""
    asked = get_charge(processor, payment)
    if payment.operation is None or asked.kind != "result":
        return asked
    assert asked.evidence.result is not None
    if asked.evidence.result.status != "requires_capture":
        return asked
    return send_operation(processor, payment)


def job(processor: Processor) -> work.Job[Payment, ChargeRequest]:
    return work.Job(
        machine=lifecycle.MACHINE,
        build=_build,
        send=lambda payment, request: charge(processor, payment, request),
        ask=lambda payment: ask(processor, payment),
        apply=lifecycle.apply_evidence,
    )


def resolve_due(database: Database, processor: Processor, policy: Policy, worker_id: str, *, actor: str) -> int:
    """One bounded round: claim due unresolved payments, resolve each. Returns how many were claimed."""
    return work.resolve_due(database, job(processor), policy, worker_id, actor=actor, statuses=states.UNRESOLVED)


def _build(connection: Connection, payment: Payment) -> ChargeRequest:
    return charge_request(payment)


def _ids(payment: Payment) -> dict[str, Any]:
    return {"payment_id": payment.id, "tenant_id": payment.tenant_id}
