"""Webhook signatures (SPEC §9, §10.1): HMAC-SHA256 over `timestamp.body`, sent as
`Paycore-Signature: t=<unix seconds>,v1=<hex digest>`. Several `v1=` values may be present
(secret rotation); one matching is enough."""

from __future__ import annotations

import hashlib
import hmac

from paycore.kit.numbers import InvalidNumber, parse_digits

SIGNATURE_HEADER = "Paycore-Signature"
TOLERANCE_S = 300  # five minutes, SPEC §10
TIMESTAMP_CHARS_MAX = 12  # unix seconds: 12 digits last past the year 33,000


class SignatureError(Exception):
    """The header is missing, malformed, stale, or no signature matches. `code` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def sign(secret: str, timestamp_s: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_s}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp_s},v1={digest}"


def sign_all(secrets: tuple[str, ...], timestamp_s: int, body: bytes) -> str:
    """One `t=` and a `v1=` per secret (a rotation's overlap signs with the new and the old)."""
    digests = [sign(secret, timestamp_s, body).split("v1=", 1)[1] for secret in secrets]
    return ",".join([f"t={timestamp_s}", *(f"v1={digest}" for digest in digests)])


def verify(secret: str, header: str | None, body: bytes, *, now_s: int, tolerance_s: int = TOLERANCE_S) -> int:
    """Return the signed timestamp, or raise SignatureError."""
    if not header:
        raise SignatureError("signature_missing", f"the {SIGNATURE_HEADER} header is required")
    malformed = SignatureError("signature_invalid", f"the {SIGNATURE_HEADER} header must be t=<seconds>,v1=<hex>")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            try:
                timestamp = parse_digits(value, chars_max=TIMESTAMP_CHARS_MAX)
            except InvalidNumber:
                raise malformed from None
        elif name == "v1" and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise malformed
    if abs(now_s - timestamp) > tolerance_s:
        raise SignatureError(
            "signature_timestamp_out_of_tolerance", f"the signed timestamp is more than {tolerance_s} s from now"
        )
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    if not any(same_secret(expected, candidate) for candidate in candidates):
        raise SignatureError("signature_invalid", "no signature in the header matches the body")
    return timestamp


def same_secret(expected: str, given: str) -> bool:
    """`given == expected` in constant time, whatever `given` holds. `hmac.compare_digest` raises
    TypeError for a str with a character outside ASCII (a header byte above 0x7F, read as
    latin-1; a form field in any script): compared as UTF-8 bytes instead, it is just unequal."""
    return hmac.compare_digest(expected.encode("utf-8", "replace"), given.encode("utf-8", "replace"))
