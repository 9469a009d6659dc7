from __future__ import annotations

import pytest

from paycore.kit.money import AMOUNT_MINOR_MAX, InvalidAmountError, checked_sum, format_minor, is_amount_minor


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
