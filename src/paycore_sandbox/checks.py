"""Request checks shared by the sandbox's calls. They run before any transaction, so a
refusal (`ProcessorRefused`) stores nothing."""

from __future__ import annotations

from paycore.kit.money import is_amount_minor, is_known_currency
from paycore.processor.port import ProcessorRefused


def check_text(name: str, value: object, length_max: int) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= length_max:
        raise ProcessorRefused("invalid_request", f"{name} must be a string of 1 to {length_max} characters")
    if not value.isprintable():
        raise ProcessorRefused("invalid_request", f"{name} must not contain control characters")


def check_money(amount_minor: object, currency: object) -> None:
    if not is_amount_minor(amount_minor):
        raise ProcessorRefused("invalid_amount", "amount_minor must be a positive integer of minor units")
    if not is_known_currency(currency):
        raise ProcessorRefused("invalid_currency", f"unsupported currency {currency!r}")
