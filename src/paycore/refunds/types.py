"""The refund as the rest of paycore sees it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from paycore.lifecycle.columns import WorkFields


@dataclass(frozen=True)
class Refund(WorkFields):
    tenant_id: str
    id: str
    payment_id: str
    idempotency_key: str | None
    amount_minor: int
    currency: str
    reason: str | None
    status: str
    failure_code: str | None
    processor_request_id: str
    processor_reference: str | None
    transfer_id: str | None


@dataclass(frozen=True)
class Totals:
    """A payment's refunds by outcome. `pending` is everything that still holds its amount
    without having succeeded (requires_approval, pending, processing, in_doubt)."""

    amount_minor: int
    pending_minor: int
    succeeded_minor: int
    failed_minor: int  # failed and canceled: released

    @property
    def refundable_minor(self) -> int:
        return self.amount_minor - self.pending_minor - self.succeeded_minor


def refund_from_row(row: Mapping[Any, Any] | Row[Any]) -> Refund:
    row = row._mapping if isinstance(row, Row) else row  # a Row or its mapping
    return Refund(**row)


def refund_row(refund: Refund) -> dict[str, Any]:
    """The row that stores `refund`: what the repository inserts."""
    return dataclasses.asdict(refund)
