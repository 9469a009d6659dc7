"""Calls to the processor about a payment, timed and turned into evidence. These run outside
any database transaction; `record` writes one into the audit log inside the next one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.payments.transitions import Evidence
from paycore.payments.types import Payment
from paycore.processor.calls import timed
from paycore.processor.port import ChargeRequest, ChargeResult, Processor


@dataclass(frozen=True)
class Call:
    operation: str
    request: dict[str, Any]
    evidence: Evidence
    outcome: dict[str, Any]
    latency_ms: int


def charge_request(payment: Payment) -> ChargeRequest:
    return ChargeRequest(
        request_id=payment.processor_request_id,
        merchant_id=payment.tenant_id,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        token=payment.source_token,
        description=payment.description,
    )


def charge(processor: Processor, payment: Payment) -> Call:
    request = charge_request(payment)
    return _timed("charge", _public(request), lambda: processor.charge(request), _ids(payment))


def get_charge(processor: Processor, payment: Payment) -> Call:
    request_id = payment.processor_request_id
    return _timed("get_charge", {"request_id": request_id}, lambda: processor.get_charge(request_id), _ids(payment))


def record(connection: Connection, payment: Payment, call: Call, *, actor: str, now_us: int) -> None:
    audit.record_processor_call(
        connection,
        payment.tenant_id,
        object_type="payment",
        object_id=payment.id,
        operation=call.operation,
        request=call.request,
        outcome=call.outcome,
        latency_ms=call.latency_ms,
        actor=actor,
        now_us=now_us,
    )


def _public(request: ChargeRequest) -> dict[str, Any]:
    fields = dataclasses.asdict(request)
    token = fields.pop("token")
    fields["token_last4"] = token[-4:]  # the token itself stays out of the log
    return fields


def _ids(payment: Payment) -> dict[str, str]:
    return {"payment_id": payment.id, "tenant_id": payment.tenant_id}


def _timed(
    operation: str, request: dict[str, Any], call: Callable[[], ChargeResult | None], ids: dict[str, str]
) -> Call:
    answer = timed(operation, call, ids=ids)
    evidence = Evidence(answer.kind, result=answer.result, refusal_code=answer.refusal_code)
    return Call(operation, request, evidence, answer.outcome, answer.latency_ms)
