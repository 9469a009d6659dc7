"""The payment as the rest of paycore sees it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Row

from paycore.lifecycle import columns
from paycore.lifecycle.columns import WorkFields


@dataclass(frozen=True)
class Payment(WorkFields):
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
    # Authorize now, capture later (SPEC §6.1). The amounts are None for an automatic payment.
    capture_method: str = "automatic"
    amount_capturable_minor: int | None = None
    amount_captured_minor: int | None = None
    authorization_expires_at_us: int | None = None
    cancellation_reason: str | None = None
    operation: str | None = None  # capture | cancel: sent on the authorization, outcome not known
    operation_idempotency_key: str | None = None  # the key of the request that sent `operation`
    capture_requested_minor: int | None = None  # what that capture asked for: sent again the same
    disputed_minor: int = 0  # what chargebacks hold of it (SPEC §6.2): rule zero counts it with refunds

    @property
    def is_manual(self) -> bool:
        return self.capture_method == "manual"


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
    actor: str  # who asked (paycore.kit.actors): the actor of the payment's events
    capture: str = "automatic"  # manual: the processor only authorizes (SPEC §6.1)


def payment_from_row(row: Mapping[Any, Any] | Row[Any]) -> Payment:
    row = row._mapping if isinstance(row, Row) else row  # a Row or its mapping
    return Payment(**{**row, "metadata": json.loads(row["metadata"])})


# `json.dumps(metadata, sort_keys=True)` without making its encoder for each row.
_METADATA: Final = json.JSONEncoder(sort_keys=True)


def payment_row(payment: Payment) -> dict[str, Any]:
    """The row that stores `payment`: what the repository inserts."""
    # A shallow copy of the fields (`dataclasses.asdict` deep-copies each value: a fifth of an
    # accept's planning); the one mutable value, the metadata, is replaced by its JSON.
    return {**vars(payment), "metadata": _METADATA.encode(payment.metadata)}


def new_payment(
    tenant_id: str,
    payment_id: str,
    idempotency_key: str,
    new: NewPayment,
    status: str,
    transfer_id: str,
    now_us: int,
    next_attempt_at_us: int | None,
) -> Payment:
    """A payment as it is born: the one home of its first values (accepted, or imported settled)."""
    return Payment(
        tenant_id=tenant_id,
        id=payment_id,
        idempotency_key=idempotency_key,
        amount_minor=new.amount_minor,
        currency=new.currency,
        source_type=new.source_type,
        source_token=new.source_token,
        destination_account_id=new.destination_account_id,
        description=new.description,
        metadata=dict(new.metadata),
        status=status,
        failure_code=None,
        processor_request_id=payment_id,  # stable: every call about this payment sends it
        processor_reference=None,
        transfer_id=transfer_id,
        refunded_minor=0,
        capture_method=new.capture,
        **columns.fresh(next_attempt_at_us=next_attempt_at_us),
        created_at_us=now_us,
        updated_at_us=now_us,
    )
