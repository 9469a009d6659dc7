"""Pydantic building blocks shared by every domain's API shapes (strict: no coercion)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

from paycore.kit.money import AMOUNT_MINOR_MAX, CURRENCY_EXPONENTS
from paycore.kit.numbers import parse_digits

# The OpenAPI document states what the API accepts, so that a schema-driven fuzzer (or a
# generated client) sends what we would accept. These only document: the checks stay in the
# services, which answer with our own error codes.
CURRENCIES_DOCUMENTED = {"enum": sorted(CURRENCY_EXPONENTS)}
TENANT_ID_DOCUMENTED = {"pattern": "^[A-Za-z0-9_.-]{1,64}$"}
DAY_DOCUMENTED = {"pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "format": "date"}

# A JSON integer, 1..2^53-1. Strict: true, 1.0, "199" and null are refused (invalid_amount).
AmountMinor = Annotated[int, Field(strict=True, gt=0, le=AMOUNT_MINOR_MAX)]
# The bounds below are also the thin edge's (paycore.http.money), which must accept no more.
ID_LENGTH_MAX = 64
CURRENCY_LENGTH = 3
METADATA_KEY_LENGTH_MAX = 40
METADATA_VALUE_LENGTH_MAX = 500
METADATA_KEYS_MAX = 50
Id = Annotated[str, StringConstraints(min_length=1, max_length=ID_LENGTH_MAX)]


def _digits(value: object) -> object:
    """A number in a query string is written in ASCII digits (paycore.kit.numbers), not as
    Pydantic's lax reading of text allows (`+1`, ` 1 `, `1_0`, `1.0`)."""
    return parse_digits(value) if isinstance(value, str) else value


# A whole number in a query string (`limit`): `Annotated[int, Query(ge=..., le=...), QUERY_DIGITS]`.
# After the `Query`: put first, it makes FastAPI document the bounds as `ge`/`le`, which no
# JSON Schema reader knows, instead of `minimum`/`maximum`.
QUERY_DIGITS = BeforeValidator(_digits)
Currency = Annotated[
    str,
    StringConstraints(min_length=CURRENCY_LENGTH, max_length=CURRENCY_LENGTH),
    Field(json_schema_extra=CURRENCIES_DOCUMENTED),
]
MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=METADATA_KEY_LENGTH_MAX)]
MetadataValue = Annotated[str, StringConstraints(max_length=METADATA_VALUE_LENGTH_MAX)]
# String values only (like Stripe's): no float can hide in metadata. Count and size are
# bounded again by settings (metadata_keys_max, metadata_bytes_max).
Metadata = Annotated[dict[MetadataKey, MetadataValue], Field(max_length=METADATA_KEYS_MAX)]


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_nul(cls, data: Any) -> Any:
        # PostgreSQL text cannot hold NUL; refuse it on both databases alike, as bad input.
        if _has_nul(data):
            raise ValueError("strings may not contain the NUL character")
        return data


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


class ErrorBody(BaseModel):
    error: str
    message: str
    param: str | None = None


TenantId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
