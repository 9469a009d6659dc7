"""The refunds API shapes (SPEC §7.1): the strict request model and the JSON of a refund."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paycore.audit.schemas import history_json
from paycore.audit.service import Event
from paycore.kit.clock import to_rfc3339
from paycore.refunds.types import Refund
from paycore.schemas import AmountMinor, StrictModel

REASON_LENGTH_MAX = 500


class RefundCreate(StrictModel):
    amount_minor: AmountMinor
    reason: str | None = Field(default=None, min_length=1, max_length=REASON_LENGTH_MAX)


def summary_json(refund: Refund) -> dict[str, Any]:
    """A list item: the refund without its history (GET the refund for that).
    `processor_reference` is the processor's refund id, known once it answered with a result."""
    return {
        "id": refund.id,
        "object": "refund",
        "payment": refund.payment_id,
        "amount_minor": refund.amount_minor,
        "currency": refund.currency,
        "status": refund.status,
        "reason": refund.reason,
        "failure_code": refund.failure_code,
        "processor_reference": refund.processor_reference,
        "created_at": to_rfc3339(refund.created_at_us),
        "updated_at": to_rfc3339(refund.updated_at_us),
    }


def refund_json(refund: Refund, history: list[Event]) -> dict[str, Any]:
    """The refund with its state changes (oldest first), last."""
    return {**summary_json(refund), "history": history_json(history)}
