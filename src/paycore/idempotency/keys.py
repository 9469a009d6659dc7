"""An idempotency key's own values (SPEC §3.1, docs/adr/0004-idempotency.md): the rule a key
must meet, the request's fingerprint, the key's scope (its tenant, the request's fingerprint, its
clock and retention) and the stored outcome. No I/O: `idempotency.service` claims and answers
keys with them and re-exports them, so callers import from one place."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.idempotency.errors import InvalidIdempotencyKey


@dataclass(frozen=True)
class Outcome:
    status: int
    body: str


_PRINTABLE: Final = re.compile("[ -~]+")  # 1 or more printable ASCII characters (0x20-0x7E)


def check_key(key: object, *, param: str = "Idempotency-Key") -> str:
    """1-255 printable ASCII characters (0x20-0x7E)."""
    problem = key_problem(key, name=param)
    if problem is not None:
        raise InvalidIdempotencyKey(problem, param=param)
    assert isinstance(key, str)
    return key


def key_problem(key: object, *, name: str = "Idempotency-Key") -> str | None:
    """What is wrong with `key`, in one sentence that says the rule; None when it is valid.
    Never echoes the key (it may be huge, or hold control characters)."""
    if type(key) is str and len(key) <= IDEMPOTENCY_KEY_LENGTH_MAX and _PRINTABLE.fullmatch(key):
        return None  # the usual key: one match, not a comparison a character (and no rule's text)
    rule = f"it must be 1-{IDEMPOTENCY_KEY_LENGTH_MAX} printable ASCII characters"
    if not isinstance(key, str):
        return f"{name} must be a string: {rule}"
    if not key:
        return f"{name} is empty: {rule}"
    if len(key) > IDEMPOTENCY_KEY_LENGTH_MAX:
        return f"{name} is too long ({len(key)} characters): {rule}"
    for index, char in enumerate(key):
        if not " " <= char <= "~":
            return f"{name} has a character that is not printable ASCII at position {index + 1}: {rule}"
    return None


# `json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` without making its
# encoder for each request; `encode` keeps no state between calls.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(method: str, path: str, body: Any) -> str:
    canonical = _CANONICAL.encode(body)
    digest = hashlib.sha256()
    digest.update(f"{method.upper()}\n{path}\n".encode())
    digest.update(canonical.encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class KeyScope:
    tenant_id: str
    key: str
    request_fingerprint: str
    now_us: int
    expires_at_us: int | None

    def row(self, outcome: Outcome | None) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "key": self.key,
            "fingerprint": self.request_fingerprint,
            "response_status": None if outcome is None else outcome.status,
            "response_body": None if outcome is None else outcome.body,
            "created_at_us": self.now_us,
            "expires_at_us": self.expires_at_us,
        }
