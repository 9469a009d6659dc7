"""What a settlement report's line proves, moved through its object's own lifecycle (cause
`settlement_report`): a charge or refund line as the processor's result, a capture line as the
authorization captured, a payout line as the bank's word (settled with its fee, or returned).
`chunks` calls `apply` for each line judged to prove something, inside its isolation."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection

from paycore.lifecycle.evidence import Evidence
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.processor.port import ChargeResult, PayoutResult, RefundResult
from paycore.reconciliation.report import Line
from paycore.refunds import service as refunds

CAUSE: Final = "settlement_report"
FAILED_CODE: Final = "failed_per_settlement_report"  # the report says failed, not why


def apply(connection: Connection, line: Line, item: Any, proves: str, actor: str, now_us: int) -> tuple[Any, bool]:
    """Apply what the line proves through the object's lifecycle: (the object now, moved?)."""
    failure = FAILED_CODE if proves == "failed" else None
    if line.type in ("charge", "refund"):
        result_type, domain = (ChargeResult, payments) if line.type == "charge" else (RefundResult, refunds)
        result = result_type(line.request_id, proves, line.processor_id, line.amount_minor, line.currency, failure)  # type: ignore[arg-type]
        if line.type == "charge" and item.is_manual:
            result = _captured(line, item)
        evidence = Evidence.of_result(result)
        applied = domain.apply_evidence(connection, item, evidence, cause=CAUSE, actor=actor, now_us=now_us)
        return applied.item, applied.changed
    said = Evidence.of_result(_payout_result(line, item))
    applied = payouts.apply_evidence(connection, item, said, cause=CAUSE, actor=actor, now_us=now_us)
    return applied.item, applied.reason == "applied"


def _captured(line: Line, payment: Any) -> ChargeResult:
    """A capture line (SPEC §6.1: the report lists captures) as the processor's word about the
    authorization: captured, `line.amount_minor` taken and the rest released, as the status
    query or the `charge.captured` webhook would say it."""
    assert 0 < line.amount_minor <= payment.amount_minor, (line, payment)
    return ChargeResult(
        request_id=line.request_id,
        status="captured",
        processor_charge_id=line.processor_id,
        amount_minor=payment.amount_minor,
        currency=line.currency,
        capture="manual",
        amount_capturable_minor=0,
        amount_captured_minor=line.amount_minor,
        amount_released_minor=payment.amount_minor - line.amount_minor,
    )


def _payout_result(line: Line, payout: Any) -> PayoutResult:
    """A payout line as the bank's word: settled (with the bank's fee) or returned."""
    if line.type == "payout":
        return PayoutResult(
            request_id=line.request_id,
            status="settled",
            bank_payout_id=line.processor_id,
            amount_minor=line.amount_minor,
            currency=line.currency,
            rail=payout.rail,
            batch_id=line.batch_id,
            fee_minor=line.fee_minor,
            settled_at_us=line.created_at_us,
        )
    return PayoutResult(
        request_id=line.request_id,
        status="returned",
        bank_payout_id=line.processor_id,
        amount_minor=payout.amount_minor,
        currency=line.currency,
        rail=payout.rail,
        batch_id=line.batch_id,
        return_code=line.code,
        return_amount_minor=line.amount_minor,
        return_fee_minor=line.fee_minor,
        returned_at_us=line.created_at_us,
    )
