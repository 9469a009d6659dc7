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


# Two base32 characters for each 10 bits: a ULID (48 + 80 bits, two zero bits on top: 130) is
# 13 look-ups. Dividing by 32 character by character cost half of a `new_ulid` (about 5 of 12
# µs), and a payment and its sandbox charge make a dozen ids.
_PAIRS: Final = tuple(first + second for first in _ALPHABET for second in _ALPHABET)
_PAIR_SHIFTS: Final = tuple(range(120, -1, -10))
_PAIR_MASK: Final = 1023


def _encode_ulid(value: int) -> str:
    """`value` (at most 130 bits) as 26 Crockford base32 characters, most significant first."""
    assert 0 <= value < 1 << 130
    return "".join([_PAIRS[(value >> shift) & _PAIR_MASK] for shift in _PAIR_SHIFTS])


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
    return _encode_ulid(now_ms << _RANDOM_BITS | random_part)


def new_id(prefix: str) -> str:
    assert prefix in PREFIXES, f"unknown id prefix {prefix!r}"
    return f"{prefix}_{new_ulid()}"


def has_prefix(value: object, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix + "_") and len(value) <= 64
