"""The one reader of numbers written in text (paycore.kit.numbers): ASCII digits only.

Every character Unicode counts as a digit or a number (categories Nd, No, Nl, and anything with
a numeric value: superscripts, fullwidth, Arabic-Indic, Devanagari, circled, Roman numerals,
fractions...) is refused, alone and beside ASCII digits; every text of ASCII digits within the
bounds is read as `int()` reads it."""

from __future__ import annotations

import string
import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paycore.kit.numbers import DIGITS_CHARS_MAX, InvalidNumber, parse_digits

NUMERIC_CATEGORIES = ("Nd", "No", "Nl")


def _numeric_characters() -> list[str]:
    """Every code point some Python or Unicode rule reads as a digit or a number, but 0-9."""
    found = []
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if char in string.digits:
            continue
        if (
            unicodedata.category(char) in NUMERIC_CATEGORIES
            or unicodedata.numeric(char, None) is not None
            or char.isdigit()
            or char.isdecimal()
            or char.isnumeric()
        ):
            found.append(char)
    return found


NUMERIC = _numeric_characters()


def test_the_classes_that_fooled_isdigit_and_int_are_all_in_the_list() -> None:
    # The test is only as good as its list: the characters that made the 500s are in it, and
    # characters int() itself reads (so `isdigit()` then `int()` is no guard at all).
    # superscripts, Arabic-Indic, Extended Arabic-Indic, Devanagari, fullwidth, circled, Roman,
    # a vulgar fraction, a mathematical double-struck digit, Osmanya
    for char in ("²", "³", "¹", "\u0661", "\u06f3", "\u096b", "\uff15", "①", "Ⅻ", "½", "\U0001d7d8", "\U000104a0"):
        assert char in NUMERIC, ascii(char)
    assert "²".isdigit() and "\u0661".isdecimal() and int("\u0661\u0662") == 12 and int("\uff15") == 5
    assert {unicodedata.category(char) for char in NUMERIC} >= set(NUMERIC_CATEGORIES)
    assert len(NUMERIC) > 1_500


def test_every_unicode_digit_and_number_is_refused_alone_and_beside_ascii_digits() -> None:
    accepted = []
    for char in NUMERIC:
        for text in (char, "1" + char, char + "1", "12" + char + "3"):
            try:
                parse_digits(text)
            except InvalidNumber as error:
                assert error.problem == "not_digits", (text, error.problem)
            else:
                accepted.append(text)
    assert accepted == []


INT_READS = ["", " 1", "1 ", "+1", "-1", "1_0", "1.0", "1e3", "0x10", "1\n", "\t1", "\u0661\u0662", "\uff11"]


@pytest.mark.parametrize("text", INT_READS)
def test_what_int_reads_but_is_not_a_number_written_in_digits_is_refused(text: str) -> None:
    with pytest.raises(InvalidNumber) as refused:
        parse_digits(text)
    assert refused.value.problem == "not_digits"


@given(st.text(alphabet=string.digits, min_size=1, max_size=DIGITS_CHARS_MAX))
def test_ascii_digits_are_read_as_int_reads_them(text: str) -> None:
    assert parse_digits(text) == int(text)


@given(st.text(min_size=1, max_size=8).filter(lambda text: not all(char in string.digits for char in text)))
def test_any_text_with_a_character_other_than_0_to_9_is_refused(text: str) -> None:
    with pytest.raises(InvalidNumber):
        parse_digits(text)


@given(st.lists(st.sampled_from(NUMERIC), min_size=1, max_size=4), st.text(alphabet=string.digits, max_size=4))
def test_numeric_characters_mixed_into_ascii_digits_are_refused(chars: list[str], digits: str) -> None:
    text = digits[:2] + "".join(chars) + digits[2:]
    with pytest.raises(InvalidNumber):
        parse_digits(text)


def test_length_range_and_canonical_form() -> None:
    assert parse_digits("9" * DIGITS_CHARS_MAX) == 10**DIGITS_CHARS_MAX - 1
    with pytest.raises(InvalidNumber) as long:
        parse_digits("9" * (DIGITS_CHARS_MAX + 1))
    assert long.value.problem == "too_long"
    assert parse_digits("012", chars_max=3) == 12
    with pytest.raises(InvalidNumber) as wide:
        parse_digits("0123", chars_max=3)
    assert wide.value.problem == "too_long"
    assert parse_digits("0", leading_zeros=False) == 0
    with pytest.raises(InvalidNumber) as zero:
        parse_digits("07", leading_zeros=False)
    assert zero.value.problem == "leading_zero"
    assert parse_digits("5", minimum=5, maximum=5) == 5
    with pytest.raises(InvalidNumber) as small:
        parse_digits("4", minimum=5)
    assert (small.value.problem, small.value.message) == ("too_small", "must be at least 5")
    with pytest.raises(InvalidNumber) as large:
        parse_digits("6", maximum=5)
    assert (large.value.problem, large.value.message) == ("too_large", "must be at most 5")
