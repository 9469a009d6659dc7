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


def format_grouped(amount_minor: int, currency: str) -> str:
    """Render 100000 USD as '1,000.00' and 1250 JPY as '1,250': `format_minor` with the whole
    part in groups of three digits, for people (`parse_major` reads it back)."""
    plain = format_minor(amount_minor, currency)
    sign, magnitude = ("-", plain[1:]) if plain.startswith("-") else ("", plain)
    whole, point, fraction = magnitude.partition(".")
    groups = [whole[max(end - 3, 0) : end] for end in range(len(whole), 0, -3)]
    return f"{sign}{','.join(reversed(groups))}{point}{fraction}"


# The most characters a typed amount may have: AMOUNT_MINOR_MAX has 16 digits, plus a point and
# a few leading zeros; a longer text is refused before any digit is read.
TYPED_AMOUNT_CHARS_MAX: Final = 24


def parse_major(text: str, currency: str) -> int:
    """The minor units a person's typed amount in major units names (`12.34` USD -> 1234,
    `1234` JPY -> 1234, `0.005` KWD -> 5, `1,250.00` USD -> 125000), by string arithmetic only:
    digits `0`-`9`, at most one point, no more decimals than the currency's exponent, no sign, no
    exponent; commas only as thousands separators, every group after the first of three digits
    (`1,250`; never `12,50`, which some write for 12.50). The inverse of `format_minor` and of
    `format_grouped`. Zero is returned as 0 (whether it is allowed is the caller's
    rule); InvalidAmountError, its message a sentence for the person, for anything else."""
    exponent = CURRENCY_EXPONENTS[currency]
    typed = text.strip()
    if not typed:
        raise InvalidAmountError("type an amount")
    if typed.startswith("-"):
        raise InvalidAmountError("the amount must not be negative")
    if len(typed) > TYPED_AMOUNT_CHARS_MAX:
        raise InvalidAmountError(f"the amount must be at most {TYPED_AMOUNT_CHARS_MAX} characters")
    whole, point, fraction = typed.partition(".")
    if "," in whole and _grouped(whole):
        whole = whole.replace(",", "")
    if not _digits(whole) or (point and not _digits(fraction)):
        example = "1234" if exponent == 0 else "12." + "34"[:exponent].ljust(exponent, "0")
        raise InvalidAmountError(f"the amount must be a number written like {example} ({currency})")
    if len(fraction) > exponent:
        places = "no decimals" if exponent == 0 else f"at most {exponent} decimals"
        raise InvalidAmountError(f"{currency} has {places} ({typed} was typed)")
    scale: int = 10**exponent
    amount_minor = int(whole) * scale + int(fraction.ljust(exponent, "0") or "0")
    if amount_minor > AMOUNT_MINOR_MAX:
        raise InvalidAmountError(f"the amount must be at most {format_minor(AMOUNT_MINOR_MAX, currency)} {currency}")
    return amount_minor


def _grouped(whole: str) -> bool:
    """`1,250` or `12,345,678`: one to three digits, then groups of exactly three."""
    first, *rest = whole.split(",")
    return 1 <= len(first) <= 3 and _digits(first) and all(len(group) == 3 and _digits(group) for group in rest)


def _digits(text: str) -> bool:
    """One or more of the ASCII digits 0-9 and nothing else (`str.isdigit` alone takes `²`)."""
    return text.isascii() and text.isdigit()
