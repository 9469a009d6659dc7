"""The report errors and their stable codes (docs/losses.md, "The API")."""

from __future__ import annotations

from paycore.kit.errors import InvalidRequest, InvalidStartingAfter

__all__ = ["InvalidDate", "InvalidDateRange", "InvalidStartingAfter"]


class InvalidDate(InvalidRequest):
    """`from` or `to` is not a calendar date written YYYY-MM-DD."""

    code = "invalid_date"


class InvalidDateRange(InvalidRequest):
    """`from` is after `to`."""

    code = "invalid_date_range"
