"""The credits API shapes (SPEC §5, contract)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paycore.credits.service import Credit
from paycore.kit.clock import to_rfc3339
from paycore.schemas import AmountMinor, StrictModel


class CreditLineIn(StrictModel):
    desc: str = Field(max_length=500)
    amount_minor: AmountMinor
    currency: str = Field(max_length=8)


class CreditCreate(StrictModel):
    idempotency_key: str = Field(min_length=1, max_length=255)
    lines: list[CreditLineIn] = Field(min_length=1)


def credit_json(credit: Credit) -> dict[str, Any]:
    return {
        "id": credit.id,
        "tenant_id": credit.tenant_id,
        "idempotency_key": credit.idempotency_key,
        "currency": credit.currency,
        "amount_minor": credit.amount_minor,
        "lines": [
            {"desc": line.desc, "amount_minor": line.amount_minor, "currency": line.currency} for line in credit.lines
        ],
        "created_at": to_rfc3339(credit.created_at_us),
    }


def balance_json(currency: str, amount_minor: int) -> dict[str, Any]:
    return {"currency": currency, "amount_minor": amount_minor}
