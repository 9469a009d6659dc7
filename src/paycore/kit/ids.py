"""Opaque, time-ordered ids with a type prefix: `txn_01JD3...` (a ULID after the prefix).

48 bits of milliseconds then 80 random bits, Crockford base32. Ids made in the same
millisecond by one process increase monotonically, so they index in insertion order.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS: Final = 80
_lock = threading.Lock()
_last_ms = 0
_last_random = 0

PREFIXES: Final = frozenset(
    {
        "pay",
        "rf",
        "po",
        "acct",
        "txn",
        "evt",
        "ent",
        "cr",
        "key",
        "batch",
        "adj",
        "req",
        "rcn",
        "brk",
        "we",
        "whd",
        "wha",
        "op",
        "ses",
        "mr",
        "dp",  # a dispute (SPEC §6.2)
    }
)


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, index = divmod(value, 32)
        chars.append(_ALPHABET[index])
    return "".join(reversed(chars))


def new_ulid() -> str:
    global _last_ms, _last_random
    now_ms = time.time_ns() // 1_000_000
    with _lock:  # monotonic within this process only; uniqueness comes from the random bits
        if now_ms <= _last_ms:
            now_ms = _last_ms
            _last_random = (_last_random + 1) % (1 << _RANDOM_BITS)
        else:
            _last_ms = now_ms
            _last_random = int.from_bytes(os.urandom(10), "big")
        random_part = _last_random
    return _encode(now_ms, 10) + _encode(random_part, 16)


def new_id(prefix: str) -> str:
    assert prefix in PREFIXES, f"unknown id prefix {prefix!r}"
    return f"{prefix}_{new_ulid()}"


def has_prefix(value: object, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix + "_") and len(value) <= 64
