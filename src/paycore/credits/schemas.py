"""The credits API shapes (SPEC §5, contract)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.credits.service import Credit
from paycore.kit.clock import to_rfc3339
from paycore.schemas import AmountMinor, StrictModel

# The bounds of a credit's body: this model's, and the thin edge's (paycore.http.money.credits),
# which reads a well-formed body without this model.
DESC_LENGTH_MAX = 500
CURRENCY_LENGTH_MAX = 8


class CreditLineIn(StrictModel):
    desc: str = Field(max_length=DESC_LENGTH_MAX)
    amount_minor: AmountMinor
    currency: str = Field(max_length=CURRENCY_LENGTH_MAX)


class CreditCreate(StrictModel):
    idempotency_key: str = Field(min_length=1, max_length=IDEMPOTENCY_KEY_LENGTH_MAX)
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
