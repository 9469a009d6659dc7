"""The refund's calls to the processor (SPEC §7.1, §8): the one refund request, sent the same
every time with the request id stored when the refund was created, and the refund's status.
Each call is timed and classified (`paycore.lifecycle.calls`); the worker rounds that make them
are `rounds`."""

from __future__ import annotations

import dataclasses

from paycore.lifecycle.calls import Call, timed
from paycore.processor.port import Processor, RefundRequest, RefundResult
from paycore.refunds.types import Refund


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
