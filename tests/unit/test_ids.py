from __future__ import annotations

import random

import pytest

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


def test_ids_made_together_are_new_and_in_order_with_those_made_one_by_one() -> None:
    made = [ids.new_id("txn"), *ids.new_ids("txn", 5000), ids.new_id("txn"), *ids.new_ids("ent", 3), ids.new_id("ent")]
    ulids = [value.partition("_")[2] for value in made]
    assert ulids == sorted(ulids) and len(set(ulids)) == len(ulids)
    assert [value.partition("_")[0] for value in made] == ["txn"] * 5002 + ["ent"] * 4
    assert ids.new_ids("txn", 0) == []


def _decoded(ulid: str) -> int:
    return int("".join(f"{ids._ALPHABET.index(char):05b}" for char in ulid), 2)


def test_ids_made_together_are_consecutive_ulids_across_the_random_bits_carry(monkeypatch: pytest.MonkeyPatch) -> None:
    far_ms = (1 << 48) - 1  # ahead of the clock: the next ids are in this millisecond
    monkeypatch.setattr(ids, "_last_ms", far_ms)
    monkeypatch.setattr(ids, "_last_random", (1 << 40) - 3)  # the low 40 bits carry into the next 40
    made = ids.new_ulids(6)
    values = [_decoded(ulid) for ulid in made]
    first = far_ms << 80 | (1 << 40) - 2
    assert values == [first + offset for offset in range(6)]
    assert made == [ids._encode_ulid(value) for value in values]


def test_one_id_of_each_prefix_made_together_is_in_order_with_those_made_one_by_one() -> None:
    before = ids.new_id("evt")
    made = ids.new_ids_of(("pay", "txn", "acct", "ent", "ent", "evt"))
    after = ids.new_id("evt")
    assert [value.split("_", 1)[0] for value in made] == ["pay", "txn", "acct", "ent", "ent", "evt"]
    ulids = [value.split("_", 1)[1] for value in [before, *made, after]]
    assert ulids == sorted(ulids) and len(set(ulids)) == len(ulids) and all(len(ulid) == 26 for ulid in ulids)
    assert ids.new_ids_of(()) == []
    with pytest.raises(AssertionError):
        ids.new_ids_of(("pay", "nope"))
