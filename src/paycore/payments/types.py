"""The payment as the rest of paycore sees it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row


@dataclass(frozen=True)
class Payment:
    tenant_id: str
    id: str
    idempotency_key: str
    amount_minor: int
    currency: str
    source_type: str
    source_token: str
    destination_account_id: str
    description: str | None
    metadata: dict[str, str]
    status: str
    failure_code: str | None
    processor_request_id: str
    processor_reference: str | None
    transfer_id: str
    refunded_minor: int
    resolve_attempts: int
    next_attempt_at_us: int | None
    claimed_by: str | None
    in_doubt_since_us: int | None
    created_at_us: int
    updated_at_us: int


@dataclass(frozen=True)
class NewPayment:
    """What a client asked for, validated."""

    amount_minor: int
    currency: str
    source_type: str
    source_token: str
    destination_account_id: str
    description: str | None
    metadata: dict[str, str]


def payment_from_row(row: Row[Any]) -> Payment:
    return Payment(
        tenant_id=row.tenant_id,
        id=row.id,
        idempotency_key=row.idempotency_key,
        amount_minor=row.amount_minor,
        currency=row.currency,
        source_type=row.source_type,
        source_token=row.source_token,
        destination_account_id=row.destination_account_id,
        description=row.description,
        metadata=json.loads(row.metadata),
        status=row.status,
        failure_code=row.failure_code,
        processor_request_id=row.processor_request_id,
        processor_reference=row.processor_reference,
        transfer_id=row.transfer_id,
        refunded_minor=row.refunded_minor,
        resolve_attempts=row.resolve_attempts,
        next_attempt_at_us=row.next_attempt_at_us,
        claimed_by=row.claimed_by,
        in_doubt_since_us=row.in_doubt_since_us,
        created_at_us=row.created_at_us,
        updated_at_us=row.updated_at_us,
    )
