from __future__ import annotations

import random

from paycore.kit import ids


def test_ids_carry_their_prefix_and_sort_in_creation_order() -> None:
    made = [ids.new_id("txn") for _ in range(1000)]
    assert all(value.startswith("txn_") and len(value) == 30 for value in made)
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def _by_division(value: int, length: int) -> str:
    """Crockford base32 one character at a time: what the 13 look-ups must equal."""
    chars = []
    for _ in range(length):
        value, index = divmod(value, 32)
        chars.append(ids._ALPHABET[index])
    return "".join(reversed(chars))


def test_a_ulid_is_its_milliseconds_then_its_random_bits_in_crockford_base32() -> None:
    picker = random.Random(7)
    edges = [(0, 0), ((1 << 48) - 1, (1 << 80) - 1), (1 << 47, 1), (1, 1 << 79)]
    for now_ms, random_bits in edges + [(picker.getrandbits(48), picker.getrandbits(80)) for _ in range(2_000)]:
        encoded = ids._encode_ulid(now_ms << 80 | random_bits)
        assert encoded == _by_division(now_ms, 10) + _by_division(random_bits, 16)
