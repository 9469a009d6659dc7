"""The sandbox HTTP API's shapes: strict request bodies (no coercion, no unknown fields) and
the JSON renderings of results. Deeper checks (known token, currency) are the service's."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import StringConstraints

from paycore.kit.schemas import AmountMinor, Currency, StrictModel
from paycore.processor.port import ChargeRequest, ChargeResult, RefundRequest, RefundResult
from paycore.sandbox.limits import (
    DESCRIPTION_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    TOKEN_LENGTH_MAX,
)

RequestId = Annotated[str, StringConstraints(min_length=1, max_length=REQUEST_ID_LENGTH_MAX)]
MerchantId = Annotated[str, StringConstraints(min_length=1, max_length=MERCHANT_ID_LENGTH_MAX)]
Token = Annotated[str, StringConstraints(min_length=1, max_length=TOKEN_LENGTH_MAX)]
Description = Annotated[str, StringConstraints(max_length=DESCRIPTION_LENGTH_MAX)]


class ChargeBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    amount_minor: AmountMinor
    currency: Currency
    token: Token
    description: Description | None = None

    def to_request(self) -> ChargeRequest:
        return ChargeRequest(**self.model_dump())


class RefundBody(StrictModel):
    request_id: RequestId
    merchant_id: MerchantId
    payment_reference: RequestId
    amount_minor: AmountMinor
    currency: Currency

    def to_request(self) -> RefundRequest:
        return RefundRequest(**self.model_dump())


def render(result: ChargeResult | RefundResult) -> dict[str, Any]:
    """A result as JSON: exactly the fields of the port's dataclass."""
    return dataclasses.asdict(result)
