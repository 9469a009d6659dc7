"""The API's dispute (SPEC §6.2, contract): the shape of `GET /v1/disputes/{id}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import Field

from paycore.audit.schemas import HistoryItem, history_json
from paycore.disputes.types import Dispute
from paycore.kit.clock import to_rfc3339
from paycore.schemas import Metadata, StrictModel

HISTORY_LENGTH_MAX: Final = 100
EVIDENCE_TEXT_LENGTH_MAX: Final = 20_000  # SPEC §6.2


class EvidenceSubmit(StrictModel):
    """`POST /v1/disputes/{id}/evidence`: the evidence's text (sent to the processor) and the
    tenant's own metadata (kept with the call in the dispute's audit log)."""

    text: str = Field(min_length=1, max_length=EVIDENCE_TEXT_LENGTH_MAX)
    metadata: Metadata | None = None


def dispute_object(dispute: Dispute) -> dict[str, Any]:
    """The dispute without its history: the snapshot its published events carry."""
    return {
        "id": dispute.id,
        "object": "dispute",
        "payment_id": dispute.payment_id,
        "amount_minor": dispute.amount_minor,
        "currency": dispute.currency,
        "fee_minor": dispute.fee_minor,
        "reason": dispute.reason,
        "status": dispute.status,
        "type": dispute.type,
        "evidence_due_by": to_rfc3339(dispute.evidence_due_by_us),
        "created_at": to_rfc3339(dispute.created_at_us),
        "updated_at": to_rfc3339(dispute.updated_at_us),
    }


def dispute_json(dispute: Dispute, history: Sequence[HistoryItem]) -> dict[str, Any]:
    """The dispute with its state changes (oldest first), last."""
    return {**dispute_object(dispute), "history": history_json(history)}
