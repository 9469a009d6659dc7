"""Calls to the processor about a refund, timed and turned into evidence. These run outside
any database transaction; `record` writes one into the audit log inside the next one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.processor.calls import timed
from paycore.processor.port import Processor, RefundRequest, RefundResult
from paycore.refunds.evidence import Evidence
from paycore.refunds.types import Refund


@dataclass(frozen=True)
class Call:
    operation: str
    request: dict[str, Any]
    evidence: Evidence
    outcome: dict[str, Any]
    latency_ms: int


def refund_request(refund: Refund, payment_reference: str) -> RefundRequest:
    """The one request sent for this refund, every time: its request id was stored with it."""
    return RefundRequest(
        request_id=refund.processor_request_id,
        merchant_id=refund.tenant_id,
        payment_reference=payment_reference,
        amount_minor=refund.amount_minor,
        currency=refund.currency,
    )


def refund(processor: Processor, request: RefundRequest) -> Call:
    ids = {"refund_id": request.request_id, "tenant_id": request.merchant_id}  # the request id is the refund's id
    return _timed("refund", dataclasses.asdict(request), lambda: processor.refund(request), ids)


def get_refund(processor: Processor, request_id: str) -> Call:
    ids = {"refund_id": request_id}
    return _timed("get_refund", {"request_id": request_id}, lambda: processor.get_refund(request_id), ids)


def record(connection: Connection, refund: Refund, call: Call, *, actor: str, now_us: int) -> None:
    audit.record_processor_call(
        connection,
        refund.tenant_id,
        object_type="refund",
        object_id=refund.id,
        operation=call.operation,
        request=call.request,
        outcome=call.outcome,
        latency_ms=call.latency_ms,
        actor=actor,
        now_us=now_us,
    )


def _timed(
    operation: str, request: dict[str, Any], call: Callable[[], RefundResult | None], ids: dict[str, str]
) -> Call:
    answer = timed(operation, call, ids=ids)
    evidence = Evidence(answer.kind, result=answer.result, refusal_code=answer.refusal_code)
    return Call(operation, request, evidence, answer.outcome, answer.latency_ms)
