"""Whole numbers read from text: a header, a query string, a form field, an environment variable,
a CSV field. One rule for all of them: the ten ASCII digits `0`-`9` and nothing else, at most
`chars_max` of them, within an optional range.

Python's own tests are wider than `int()` and wider than the protocols: `"²".isdigit()` and
`"①".isdigit()` are true while `int("²")` raises, and `int()` reads Arabic-Indic digits
(U+0660-U+0669), fullwidth ones (U+FF10-U+FF19), `" 12 "`, `"+12"` and `"1_2"`. Text that passes
one check and fails the next is how a request became a 500; text read as a number by one reader
and refused by another is how two systems disagree. Here a number is written one way only."""

from __future__ import annotations

from typing import Final

# The most digits a number may have unless its reader says otherwise: 2^63 - 1 has 19, so a
# longer text is refused before `int()` reads it (CPython's `int()` is quadratic in the length).
DIGITS_CHARS_MAX: Final = 19


class InvalidNumber(ValueError):
    """The text is not a whole number written in ASCII digits, or it is outside its bounds.
    `problem` says which (`not_digits`, `too_long`, `leading_zero`, `too_small`, `too_large`);
    the message is a phrase to put after the field's name."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem
        self.message = message


def parse_digits(
    text: str,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    chars_max: int = DIGITS_CHARS_MAX,
    leading_zeros: bool = True,
) -> int:
    """The number `text` writes in the digits 0-9 (no sign, no space, no underscore, no other
    script's digits), of 1 to `chars_max` characters, from `minimum` to `maximum` (when given).
    `leading_zeros=False`: the canonical form only (`0`, or no leading `0`).
    InvalidNumber otherwise."""
    assert 0 < chars_max <= 4_300, "int() of a longer text is refused by CPython itself"
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()):
        # On ASCII text `isdigit` is exactly [0-9]; `isascii` is true of the empty text.
        raise InvalidNumber("not_digits", "must be a whole number written in the digits 0-9")
    if len(text) > chars_max:
        raise InvalidNumber("too_long", f"must be at most {chars_max} digits")
    if not leading_zeros and len(text) > 1 and text[0] == "0":
        raise InvalidNumber("leading_zero", "must not start with 0")
    value = int(text)
    if value < minimum:
        raise InvalidNumber("too_small", f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidNumber("too_large", f"must be at most {maximum}")
    return value
