"""The processor's webhook payload (docs/sandbox.md), validated strictly."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.schemas import AmountMinor, Currency, StrictModel, TenantId


class EventData(StrictModel):
    object: Literal["charge", "refund", "payout"]
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


class ProcessorEvent(StrictModel):
    id: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1, max_length=64)
    created_at: str = Field(max_length=64)
    sequence: int = Field(strict=True, ge=0)
    data: EventData
