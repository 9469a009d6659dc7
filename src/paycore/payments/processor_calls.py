"""The payment's calls to the processor (SPEC §10): the one charge request, stored with the
payment and sent the same every time; the charge's status; the capture or cancel of an
authorization. Each call is timed and classified (`paycore.lifecycle.calls`); the worker
round that makes them again is `rounds`.
"""

from __future__ import annotations

from typing import Any

from paycore.lifecycle.calls import Call, timed, timed_on_loop
from paycore.payments import states
from paycore.payments.types import Payment
from paycore.processor.port import (
    CallsOnLoop,
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


async def charge_on_loop(caller: CallsOnLoop, payment: Payment) -> Call[ChargeResult]:
    """`charge` from the event loop, without a thread (`port.loop_caller`): the same request,
    recorded and classified the same."""
    request = charge_request(payment)
    fields = charge_request_fields(request)
    fields["token_last4"] = fields.pop("token")[-4:]  # the token itself stays out of the log
    return await timed_on_loop("charge", fields, caller.charge_on_loop(request), ids=_ids(payment))


def get_charge(processor: Processor, payment: Payment) -> Call[ChargeResult]:
    request_id = payment.processor_request_id
    return timed("get_charge", {"request_id": request_id}, lambda: processor.get_charge(request_id), ids=_ids(payment))


def operation_request_id(payment: Payment) -> str:
    """The request id of the payment's capture or cancel: stable, one of each per payment."""
    assert payment.operation in (states.CAPTURE, states.CANCEL), payment
    return f"{payment.processor_request_id}_{payment.operation}"


def send_operation(processor: Processor, payment: Payment) -> Call[ChargeResult]:
    """The payment's capture or cancel (`Payment.operation`), the same request every time."""
    request, fields = _operation(payment)
    if isinstance(request, CaptureRequest):
        capture = request
        return timed("capture", fields, lambda: processor.capture(capture), ids=_ids(payment))
    return timed("cancel", fields, lambda: processor.cancel(request), ids=_ids(payment))


async def send_operation_on_loop(caller: CallsOnLoop, payment: Payment) -> Call[ChargeResult]:
    """`send_operation` from the event loop, without a thread (`port.loop_caller`): the same
    request, recorded and classified the same (no answer in time: unreachable, in doubt)."""
    request, fields = _operation(payment)
    if isinstance(request, CaptureRequest):
        return await timed_on_loop("capture", fields, caller.capture_on_loop(request), ids=_ids(payment))
    return await timed_on_loop("cancel", fields, caller.cancel_on_loop(request), ids=_ids(payment))


def _operation(payment: Payment) -> tuple[CaptureRequest | CancelRequest, dict[str, Any]]:
    """The capture's or cancel's one request, and its fields as the call's record holds them."""
    assert payment.processor_reference is not None, "an authorization has the processor's charge id"
    request_id, reference = operation_request_id(payment), payment.processor_reference
    if payment.operation == states.CAPTURE:
        assert payment.capture_requested_minor is not None
        capture = CaptureRequest(
            request_id, payment.tenant_id, reference, payment.capture_requested_minor, payment.currency
        )
        return capture, {"request_id": request_id, "payment_reference": reference, "amount_minor": capture.amount_minor}
    return CancelRequest(request_id, payment.tenant_id, reference), {
        "request_id": request_id,
        "payment_reference": reference,
    }


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


def _ids(payment: Payment) -> dict[str, Any]:
    return {"payment_id": payment.id, "tenant_id": payment.tenant_id}
