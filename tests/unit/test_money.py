from __future__ import annotations

import re

import pytest

from paycore.kit.money import (
    AMOUNT_MINOR_MAX,
    InvalidAmountError,
    checked_sum,
    format_grouped,
    format_minor,
    is_amount_minor,
    parse_major,
)


@pytest.mark.parametrize("value", [True, False, 1.0, 0.1, "199", None, 0, -1, 2**53, [1], {"a": 1}])
def test_refuses_what_is_not_a_positive_json_integer(value: object) -> None:
    assert not is_amount_minor(value)


@pytest.mark.parametrize("value", [1, 199, AMOUNT_MINOR_MAX])
def test_accepts_positive_integers_up_to_2_53_minus_1(value: int) -> None:
    assert is_amount_minor(value)


def test_checked_sum_refuses_totals_past_the_json_bound() -> None:
    assert checked_sum([AMOUNT_MINOR_MAX - 1, 1]) == AMOUNT_MINOR_MAX
    with pytest.raises(InvalidAmountError):
        checked_sum([AMOUNT_MINOR_MAX, 1])


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [(1234, "USD", "12.34"), (5, "USD", "0.05"), (-5, "EUR", "-0.05"), (1234, "JPY", "1234"), (1, "KWD", "0.001")],
)
def test_format_minor_uses_integer_arithmetic(amount: int, currency: str, text: str) -> None:
    assert format_minor(amount, currency) == text


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (100000, "USD", "1,000.00"),
        (99999, "USD", "999.99"),
        (5, "USD", "0.05"),
        (-123456789, "EUR", "-1,234,567.89"),
        (1250, "JPY", "1,250"),
        (125, "JPY", "125"),
        (1234567, "KWD", "1,234.567"),
        (AMOUNT_MINOR_MAX, "USD", "90,071,992,547,409.91"),
    ],
)
def test_format_grouped_separates_thousands_in_the_currency_exponent(amount: int, currency: str, text: str) -> None:
    assert format_grouped(amount, currency) == text


@pytest.mark.parametrize(
    ("typed", "currency", "amount_minor"),
    [
        ("12.34", "USD", 1234),
        ("12.3", "USD", 1230),
        ("12", "USD", 1200),
        ("0.05", "USD", 5),
        (" 7.50 ", "EUR", 750),
        ("0", "USD", 0),
        ("1234", "JPY", 1234),
        ("0.005", "KWD", 5),
        ("90071992547409.91", "USD", AMOUNT_MINOR_MAX),
        ("0.1", "USD", 10),  # 0.1 is no binary fraction: a float would not be exact, strings are
        ("0.29", "USD", 29),  # float(0.29) * 100 == 28.999999999999996
        ("12.5", "USD", 1250),
        ("12.50", "USD", 1250),
        ("1,250.00", "USD", 125000),
        ("1,250", "JPY", 1250),
        ("1250", "JPY", 1250),
        ("12,345,678.9", "EUR", 1234567890),
        ("90,071,992,547,409.91", "USD", AMOUNT_MINOR_MAX),
    ],
)
def test_parse_major_reads_a_typed_amount_exactly_in_the_currency_exponent(
    typed: str, currency: str, amount_minor: int
) -> None:
    assert parse_major(typed, currency) == amount_minor
    assert parse_major(format_minor(amount_minor, currency), currency) == amount_minor  # the inverse
    assert parse_major(format_grouped(amount_minor, currency), currency) == amount_minor  # and this one's


@pytest.mark.parametrize(
    ("typed", "currency", "reason"),
    [
        ("", "USD", "type an amount"),
        ("   ", "USD", "type an amount"),
        ("-1", "USD", "must not be negative"),
        ("-0.01", "USD", "must not be negative"),
        ("12.345", "USD", "USD has at most 2 decimals"),
        ("1.5", "JPY", "JPY has no decimals"),
        ("0.0001", "KWD", "KWD has at most 3 decimals"),
        ("abc", "USD", "written like 12.34"),
        ("1e3", "USD", "written like 12.34"),
        ("12,50", "USD", "written like 12.34"),  # a decimal comma is not read as a separator
        ("1,00", "USD", "written like 12.34"),
        ("1,0000", "USD", "written like 12.34"),
        ("1234,567", "USD", "written like 12.34"),
        (",123", "USD", "written like 12.34"),
        ("1,", "USD", "written like 12.34"),
        ("1,,000", "USD", "written like 12.34"),
        ("1.000,50", "EUR", "written like 12.34"),
        ("1,250.5,0", "USD", "written like 12.34"),
        ("1,250.5", "JPY", "JPY has no decimals"),
        ("1_000", "USD", "written like 12.34"),
        ("+1", "USD", "written like 12.34"),
        ("1 2", "USD", "written like 12.34"),
        ("1.2.3", "USD", "written like 12.34"),
        (".5", "USD", "written like 12.34"),
        ("5.", "USD", "written like 12.34"),
        ("²", "USD", "written like 12.34"),
        ("\uff15", "USD", "written like 12.34"),  # a fullwidth 5: int() reads it, we do not
        ("\u0661", "USD", "written like 12.34"),
        ("NaN", "USD", "written like 12.34"),
        ("inf", "JPY", "written like 1234"),
        ("90071992547409.92", "USD", "at most 90071992547409.91 USD"),
        ("9" * 25, "USD", "at most 24 characters"),
    ],
)
def test_parse_major_refuses_what_is_not_an_exact_amount_with_the_reason(
    typed: str, currency: str, reason: str
) -> None:
    with pytest.raises(InvalidAmountError, match=re.escape(reason)):
        parse_major(typed, currency)
