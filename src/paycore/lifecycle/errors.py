"""What a call to another system can raise, as the lifecycle classifies it (standard library
only, so that a port or a fake of another system can raise them without importing more)."""

from __future__ import annotations


class Refused(Exception):
    """The other system answered that it did nothing; `code` is its stable error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Unreachable(Exception):
    """No usable answer: timeout, dropped connection, 5xx. The request may have taken effect."""
