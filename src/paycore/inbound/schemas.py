"""The processor's webhook payload (docs/sandbox.md), validated strictly."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.schemas import AmountMinor, Currency, StrictModel, TenantId


class EventData(StrictModel):
    object: Literal["charge", "refund", "payout", "dispute"]
    request_id: str = Field(min_length=1, max_length=128)
    merchant_id: TenantId
    status: Literal[
        "succeeded",
        "failed",
        "pending",
        "requires_capture",
        "captured",
        "canceled",
        "expired",
        "accepted",
        "rejected",
        "settled",
        "returned",
        # disputes (SPEC §6.2)
        "needs_response",
        "under_review",
        "won",
        "lost",
        "warning_needs_response",
        "warning_closed",
    ]
    amount_minor: AmountMinor
    currency: Currency
    failure_code: str | None = Field(default=None, max_length=64)
    processor_charge_id: str | None = Field(default=None, max_length=128)
    processor_refund_id: str | None = Field(default=None, max_length=128)
    payment_reference: str | None = Field(default=None, max_length=128)
    # authorizations (SPEC §6.1): a charge asked with capture manual, docs/sandbox.md
    capture: Literal["automatic", "manual"] | None = None
    amount_capturable_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    amount_captured_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    amount_released_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    authorization_expires_at: str | None = Field(default=None, max_length=64)
    # payouts (the bank rail): docs/sandbox.md
    rail: Literal["ach", "sepa"] | None = None
    bank_payout_id: str | None = Field(default=None, max_length=128)
    batch_id: str | None = Field(default=None, max_length=128)
    fee_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    return_code: str | None = Field(default=None, max_length=16)
    return_amount_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    return_fee_minor: int | None = Field(default=None, strict=True, ge=0, le=AMOUNT_MINOR_MAX)
    # disputes (docs/sandbox.md "Disputes"): `request_id` is the disputed charge's (`charge_request_id`)
    dispute_id: str | None = Field(default=None, min_length=1, max_length=128)
    charge_request_id: str | None = Field(default=None, min_length=1, max_length=128)
    type: Literal["chargeback", "inquiry"] | None = None
    reason: str | None = Field(default=None, min_length=1, max_length=64)
    evidence_due_by: str | None = Field(default=None, max_length=64)
    evidence_submitted: bool | None = None
    created_at: str | None = Field(default=None, max_length=64)
    closed_at: str | None = Field(default=None, max_length=64)

    @model_validator(mode="before")
    @classmethod
    def _dispute_request_id(cls, data: Any) -> Any:
        """A dispute's event names the object it concerns by the disputed charge's request id."""
        if isinstance(data, dict) and data.get("object") == "dispute" and "request_id" not in data:
            return {**data, "request_id": data.get("charge_request_id")}
        return data


class ProcessorEvent(StrictModel):
    id: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1, max_length=64)
    created_at: str = Field(max_length=64)
    sequence: int = Field(strict=True, ge=0)
    data: EventData
