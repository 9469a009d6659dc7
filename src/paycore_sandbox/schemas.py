"""The sandbox HTTP API's shapes: strict request bodies (no coercion, no unknown fields) and
the JSON renderings of results. Deeper checks (known token, currency) are the service's."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Final, Literal

from pydantic import StrictInt, StringConstraints
from sqlalchemy import RowMapping

from paycore.kit import clock
from paycore.processor.port import (
    CancelRequest,
    CaptureRequest,
    ChargeRequest,
    ChargeResult,
    PayoutRequest,
    PayoutResult,
    RefundRequest,
    RefundResult,
)
from paycore.schemas import AmountMinor, Currency, StrictModel
from paycore_sandbox.disputes import AcceptRequest, EvidenceRequest, OpenDisputeRequest
from paycore_sandbox.limits import (
    ACCOUNT_NUMBER_LENGTH_MAX,
    BENEFICIARY_NAME_LENGTH_MAX,
    BIC_LENGTH_MAX,
    DESCRIPTION_LENGTH_MAX,
    EVIDENCE_TEXT_LENGTH_MAX,
    IBAN_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    ROUTING_NUMBER_LENGTH,
    TOKEN_LENGTH_MAX,
)

RequestId = Annotated[str, StringConstraints(min_length=1, max_length=REQUEST_ID_LENGTH_MAX)]
MerchantId = Annotated[str, StringConstraints(min_length=1, max_length=MERCHANT_ID_LENGTH_MAX)]
Token = Annotated[str, StringConstraints(min_length=1, max_length=TOKEN_LENGTH_MAX)]
Description = Annotated[str, StringConstraints(max_length=DESCRIPTION_LENGTH_MAX)]
Rail = Annotated[str, StringConstraints(min_length=1, max_length=8)]
BeneficiaryName = Annotated[str, StringConstraints(min_length=1, max_length=BENEFICIARY_NAME_LENGTH_MAX)]
Iban = Annotated[str, StringConstraints(min_length=1, max_length=IBAN_LENGTH_MAX)]
Bic = Annotated[str, StringConstraints(min_length=1, max_length=BIC_LENGTH_MAX)]
RoutingNumber = Annotated[str, StringConstraints(min_length=1, max_length=ROUTING_NUMBER_LENGTH)]
AccountNumber = Annotated[str, StringConstraints(min_length=1, max_length=ACCOUNT_NUMBER_LENGTH_MAX)]


class ChargeBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    amount_minor: AmountMinor
    currency: Currency
    token: Token
    description: Description | None = None
    capture: Literal["automatic", "manual"] = "automatic"

    def to_request(self) -> ChargeRequest:
        return ChargeRequest(**self.model_dump())


class CaptureBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    payment_reference: RequestId
    amount_minor: AmountMinor
    currency: Currency

    def to_request(self) -> CaptureRequest:
        return CaptureRequest(**self.model_dump())


class CancelBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    payment_reference: RequestId

    def to_request(self) -> CancelRequest:
        return CancelRequest(**self.model_dump())


class RefundBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    payment_reference: RequestId
    amount_minor: AmountMinor
    currency: Currency

    def to_request(self) -> RefundRequest:
        return RefundRequest(**self.model_dump())


class PayoutBody(StrictModel):
    """The fields of `PayoutRequest`. Which account fields a rail needs, and whether they
    are valid, is the service's check (so both transports refuse alike)."""

    request_id: RequestId
    merchant_id: MerchantId
    amount_minor: AmountMinor
    currency: Currency
    rail: Rail
    beneficiary_name: BeneficiaryName
    iban: Iban | None = None
    bic: Bic | None = None
    routing_number: RoutingNumber | None = None
    account_number: AccountNumber | None = None

    def to_request(self) -> PayoutRequest:
        return PayoutRequest(**self.model_dump())  # the rail's value is checked by the service


class OpenDisputeBody(StrictModel):
    """The admin call's body: which reasons and types exist is the service's check (so both
    transports refuse alike)."""

    payment_reference: RequestId
    amount_minor: AmountMinor | None = None
    reason: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "fraudulent"
    type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "chargeback"
    evidence_window_ms: StrictInt | None = None  # the service checks its bound (both transports alike)

    def to_request(self) -> OpenDisputeRequest:
        return OpenDisputeRequest(**self.model_dump())


class EvidenceBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    text: Annotated[str, StringConstraints(min_length=1, max_length=EVIDENCE_TEXT_LENGTH_MAX)]

    def to_request(self, dispute_id: str) -> EvidenceRequest:
        return EvidenceRequest(dispute_id=dispute_id, **self.model_dump())


class AcceptBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId

    def to_request(self, dispute_id: str) -> AcceptRequest:
        return AcceptRequest(dispute_id=dispute_id, **self.model_dump())


# An authorization's fields of a charge (ChargeResult): left out of an automatic charge's
# answer, which stays what it was before authorizations (a reader takes their absence as
# automatic, as paycore's HTTP transport does).
AUTHORIZATION_FIELDS: Final = (
    "capture",
    "amount_capturable_minor",
    "amount_captured_minor",
    "amount_released_minor",
    "authorization_expires_at_us",
)


def render(result: ChargeResult | RefundResult | PayoutResult) -> dict[str, Any]:
    """A result as JSON: exactly the fields of the port's dataclass (an automatic charge's
    without the authorization's fields)."""
    rendered = dataclasses.asdict(result)
    if isinstance(result, ChargeResult) and result.capture == "automatic":
        for name in AUTHORIZATION_FIELDS:
            del rendered[name]
    return rendered


def render_batch(batch: RowMapping, payouts: list[PayoutResult]) -> dict[str, Any]:
    closed_at_us = batch["closed_at_us"]
    return {
        "batch_id": batch["batch_id"],
        "rail": batch["rail"],
        "currency": batch["currency"],
        "status": "open" if closed_at_us is None else "closed",
        "count": batch["count"],
        "total_minor": batch["total_minor"],
        "opened_at": clock.to_rfc3339(batch["opened_at_us"]),
        "closes_at": clock.to_rfc3339(batch["closes_at_us"]),
        "closed_at": None if closed_at_us is None else clock.to_rfc3339(closed_at_us),
        "payouts": [render(payout) for payout in payouts],
    }
