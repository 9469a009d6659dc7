"""Money is an integer count of a currency's minor unit, everywhere.

The exponent table below is the one place that knows how many minor units make a
major unit. Nothing in paycore converts money to binary floating point: display
formatting is integer arithmetic (`format_minor`).
"""

from __future__ import annotations

from typing import Final

# 2**53 - 1: the largest integer every JSON client (JavaScript included) reads exactly.
AMOUNT_MINOR_MAX: Final = 9_007_199_254_740_991
# Cached balances live in signed 64-bit columns on both databases.
BALANCE_MINOR_MAX: Final = 9_223_372_036_854_775_807

# ISO 4217 code -> exponent (minor units per major unit = 10**exponent).
CURRENCY_EXPONENTS: Final[dict[str, int]] = {
    "USD": 2,
    "EUR": 2,
    "GBP": 2,
    "CHF": 2,
    "CAD": 2,
    "AUD": 2,
    "SEK": 2,
    "NOK": 2,
    "DKK": 2,
    "PLN": 2,
    "JPY": 0,
    "KRW": 0,
    "BHD": 3,
    "KWD": 3,
}


class InvalidAmountError(ValueError):
    """An amount is not a positive integer of minor units within bounds."""


def is_amount_minor(value: object, *, allow_zero: bool = False) -> bool:
    """True for a positive (or zero, if allowed) int within AMOUNT_MINOR_MAX; never a bool."""
    if type(value) is not int:  # rejects bool, float, str, None and int subclasses
        return False
    lower = 0 if allow_zero else 1
    return lower <= value <= AMOUNT_MINOR_MAX


def checked_sum(amounts: list[int], *, limit: int = AMOUNT_MINOR_MAX) -> int:
    """Sum amounts, refusing a total above `limit` (Python ints do not overflow; JSON does)."""
    total = 0
    for amount in amounts:
        assert type(amount) is int, "amounts are ints by the time they are summed"
        total += amount
        if total > limit:
            raise InvalidAmountError(f"sum exceeds {limit}")
    return total


def is_known_currency(code: object) -> bool:
    return isinstance(code, str) and code in CURRENCY_EXPONENTS


def format_minor(amount_minor: int, currency: str) -> str:
    """Render 1234 USD as '12.34' with integer arithmetic only."""
    exponent = CURRENCY_EXPONENTS[currency]
    sign = "-" if amount_minor < 0 else ""
    magnitude = abs(amount_minor)
    if exponent == 0:
        return f"{sign}{magnitude}"
    major, minor = divmod(magnitude, 10**exponent)
    return f"{sign}{major}.{minor:0{exponent}d}"
