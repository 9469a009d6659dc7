"""Calls to the bank rail about a payout, timed and turned into evidence. These run outside
any database transaction; `record` writes one (an attempt) into the audit log in the next."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.payouts.types import Payout
from paycore.payouts.validation import mask
from paycore.processor.calls import Answer, timed
from paycore.processor.port import PayoutRequest, PayoutResult, Processor

_MASKED = ("iban", "account_number")


@dataclass(frozen=True)
class Call:
    operation: str
    request: dict[str, Any]  # as recorded: account identifiers masked to their last four
    answer: Answer[PayoutResult]


def payout_request(payout: Payout) -> PayoutRequest:
    """The one request sent for this payout, every time: its id is the bank's dedupe key."""
    return PayoutRequest(
        request_id=payout.id,
        merchant_id=payout.tenant_id,
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        rail="ach" if payout.rail == "ach" else "sepa",
        beneficiary_name=payout.beneficiary_name,
        iban=payout.iban,
        bic=payout.bic,
        routing_number=payout.routing_number,
        account_number=payout.account_number,
    )


def send(processor: Processor, request: PayoutRequest) -> Call:
    recorded = dataclasses.asdict(request)
    for name in _MASKED:
        recorded[name] = mask(recorded[name])
    ids = {"payout_id": request.request_id, "tenant_id": request.merchant_id}  # never the account fields
    return _timed("send_payout", recorded, lambda: processor.send_payout(request), ids)


def get(processor: Processor, request_id: str) -> Call:
    ids = {"payout_id": request_id}
    return _timed("get_payout", {"request_id": request_id}, lambda: processor.get_payout(request_id), ids)


def record(connection: Connection, payout: Payout, call: Call, *, attempt: int, actor: str, now_us: int) -> None:
    audit.record_processor_call(
        connection,
        payout.tenant_id,
        object_type="payout",
        object_id=payout.id,
        operation=call.operation,
        request=call.request,
        outcome=call.answer.outcome,
        latency_ms=call.answer.latency_ms,
        actor=actor,
        now_us=now_us,
        attempt=attempt,
    )


def _timed(
    operation: str, request: dict[str, Any], call: Callable[[], PayoutResult | None], ids: dict[str, str]
) -> Call:
    return Call(operation, request, timed(operation, call, ids=ids))
