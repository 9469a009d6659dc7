"""The report errors and their stable codes (docs/losses.md, "The API")."""

from __future__ import annotations

from paycore.kit.errors import InvalidRequest


class InvalidDate(InvalidRequest):
    """`from` or `to` is not a calendar date written YYYY-MM-DD."""

    code = "invalid_date"


class InvalidDateRange(InvalidRequest):
    """`from` is after `to`."""

    code = "invalid_date_range"


class InvalidStartingAfter(InvalidRequest):
    """`starting_after` is not a payout listed by this report (same range and filters)."""

    code = "invalid_starting_after"
