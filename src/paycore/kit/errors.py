"""Typed domain errors. Each carries a stable snake_case code; HTTP status lives in `http/`.

A domain error is an operating error (bad input, a business refusal): it is answered, not
crashed on. Programmer errors are assertions.
"""

from __future__ import annotations


class DomainError(Exception):
    code = "error"
    # True for business refusals whose transaction would have committed (§3.1): the
    # idempotency layer records them, so a retry with the same key replays the refusal.
    recorded = False

    def __init__(self, message: str, *, param: str | None = None, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.details = details


class InvalidRequest(DomainError):
    code = "invalid_request"


class InvalidAmount(InvalidRequest):
    code = "invalid_amount"


class UnsupportedCurrency(InvalidRequest):
    code = "unsupported_currency"


class InvalidStartingAfter(InvalidRequest):
    """The one cursor rule of every list (docs/api.md, "Pagination"): `starting_after` names an
    object the list holds (the last one of the previous page); empty or unknown is refused."""

    code = "invalid_starting_after"


class Forbidden(DomainError):
    """The caller may not do this, whatever the input (HTTP 403)."""

    code = "forbidden"


class NotFound(DomainError):
    code = "not_found"


class Conflict(DomainError):
    code = "conflict"


class BusinessRefusal(DomainError):
    code = "refused"
    recorded = True


class DuplicateJsonKey(InvalidRequest):
    """A JSON object names a key twice (paycore.kit.strict_json); `param` is the key's path."""

    code = "duplicate_json_key"
