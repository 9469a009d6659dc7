"""Opaque, time-ordered ids with a type prefix: `txn_01JD3...` (a ULID after the prefix).

48 bits of milliseconds then 80 random bits, Crockford base32. Ids made in the same
millisecond by one process increase monotonically, so they index in insertion order.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Final

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS: Final = 80
IDS_PER_CALL_MAX: Final = 1_000_000  # a bound on `new_ulids`: a batch's ids, with room
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
_LOW_BITS: Final = 40  # the random bits' last 8 characters
_LOW_SHIFTS: Final = (30, 20, 10, 0)


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


def new_ulids(count: int) -> list[str]:
    """`count` ULIDs, as `count` calls of `new_ulid` in one millisecond would make them (the clock
    and the lock once, not per id: a batch of 8,000 transfers makes 24,000 ids)."""
    global _last_ms, _last_random
    assert 0 <= count <= IDS_PER_CALL_MAX, count
    if count == 0:
        return []
    now_ms = time.time_ns() // 1_000_000
    with _lock:
        if now_ms <= _last_ms:
            now_ms = _last_ms
            first = (_last_random + 1) % (1 << _RANDOM_BITS)
        else:
            _last_ms = now_ms
            first = int.from_bytes(os.urandom(10), "big")
        _last_random = (first + count - 1) % (1 << _RANDOM_BITS)
    # The milliseconds are the first 10 characters of each, the random bits' top 40 the next 8
    # (the same for runs of 2^40 ids): encoded once, and the last 8 characters per id.
    head = _encode_ulid(now_ms << _RANDOM_BITS)[:10]
    made: list[str] = []
    middle_of: dict[int, str] = {}
    for offset in range(count):
        random_part = (first + offset) % (1 << _RANDOM_BITS)
        high = random_part >> _LOW_BITS
        middle = middle_of.get(high)
        if middle is None:
            middle = middle_of[high] = _encode_ulid(high << _LOW_BITS)[10:18]
        made.append(head + middle + "".join([_PAIRS[(random_part >> shift) & _PAIR_MASK] for shift in _LOW_SHIFTS]))
    return made


def new_ids(prefix: str, count: int) -> list[str]:
    """`count` new ids of one prefix (`new_ulids`)."""
    assert prefix in PREFIXES, f"unknown id prefix {prefix!r}"
    return [f"{prefix}_{ulid}" for ulid in new_ulids(count)]


def new_ids_of(prefixes: Sequence[str]) -> list[str]:
    """One new id of each prefix, in their order: what `new_id` called for each in turn within
    one millisecond makes (`new_ulids`: the clock and the lock once; a payment's phase makes five
    or six, about 1 µs an id less)."""
    assert PREFIXES.issuperset(prefixes), f"unknown id prefix in {prefixes!r}"
    return [f"{prefix}_{ulid}" for prefix, ulid in zip(prefixes, new_ulids(len(prefixes)), strict=True)]


def new_id(prefix: str) -> str:
    assert prefix in PREFIXES, f"unknown id prefix {prefix!r}"
    return f"{prefix}_{new_ulid()}"


def has_prefix(value: object, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix + "_") and len(value) <= 64
