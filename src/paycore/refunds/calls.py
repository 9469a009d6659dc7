"""Calls to the processor about a refund, timed and turned into evidence. These run outside
any database transaction; `record` writes one into the audit log inside the next one."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.processor.port import Processor, ProcessorRefused, ProcessorUnreachable, RefundRequest, RefundResult
from paycore.refunds.evidence import Evidence
from paycore.refunds.types import Refund

log = logging.getLogger(__name__)
_MESSAGE_LENGTH_MAX = 500


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
    return _timed("refund", dataclasses.asdict(request), lambda: processor.refund(request))


def get_refund(processor: Processor, request_id: str) -> Call:
    return _timed("get_refund", {"request_id": request_id}, lambda: processor.get_refund(request_id))


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


def _timed(operation: str, request: dict[str, Any], call: Callable[[], RefundResult | None]) -> Call:
    started = time.monotonic_ns()
    try:
        result = call()
    except ProcessorRefused as error:
        evidence = Evidence("refused", refusal_code=error.code)
        outcome: dict[str, Any] = {"outcome": "refused", "error": error.code, "message": str(error)}
    except ProcessorUnreachable as error:
        evidence = Evidence("unreachable")
        outcome = {"outcome": "unreachable", "error": type(error).__name__, "message": str(error)[:_MESSAGE_LENGTH_MAX]}
    except Exception as error:  # an unexpected transport failure proves nothing either way
        log.exception("processor %s failed unexpectedly", operation)
        evidence = Evidence("unreachable")
        outcome = {"outcome": "unreachable", "error": type(error).__name__, "message": str(error)[:_MESSAGE_LENGTH_MAX]}
    else:
        if result is None:
            evidence = Evidence("not_found")
            outcome = {"outcome": "not_found"}
        else:
            evidence = Evidence.of_result(result)
            outcome = {"outcome": "answered", **dataclasses.asdict(result)}
    latency_ms = (time.monotonic_ns() - started) // 1_000_000
    return Call(operation, request, evidence, outcome, latency_ms)
