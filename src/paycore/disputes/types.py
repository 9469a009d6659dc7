"""The dispute as paycore records it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row


@dataclass(frozen=True)
class Dispute:
    tenant_id: str
    id: str  # dp_...
    processor_dispute_id: str
    payment_id: str
    type: str  # chargeback | inquiry
    status: str
    reason: str
    amount_minor: int
    currency: str
    fee_minor: int
    evidence_due_by_us: int
    # What the ledger moved for it (docs/ledger.md, "Disputes"): withdrawn from the merchant
    # (amount and fee, once, when it is a chargeback), reinstated (the amount, once, when won).
    withdrawn_minor: int
    reinstated_minor: int
    withdrawal_transfer_id: str | None
    reinstatement_transfer_id: str | None
    created_at_us: int
    updated_at_us: int


@dataclass(frozen=True)
class ProcessorDispute:
    """What the processor said of a dispute (a webhook's data, a status query's answer)."""

    processor_dispute_id: str
    charge_request_id: str  # = the payment's id (SPEC §6: the stable reference of its calls)
    merchant_id: str
    type: str
    status: str
    reason: str
    amount_minor: int
    currency: str
    fee_minor: int
    evidence_due_by_us: int
    # Whether the processor holds evidence for it (an inquiry's stays `warning_needs_response`):
    # with a status out of `states.OPEN`, the word that the dispute takes no more answers.
    evidence_submitted: bool = False


def dispute_from_row(row: Mapping[Any, Any] | Row[Any]) -> Dispute:
    mapping = row._mapping if isinstance(row, Row) else row
    return Dispute(**mapping)
