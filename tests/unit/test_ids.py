from __future__ import annotations

from paycore.kit import ids


def test_ids_carry_their_prefix_and_sort_in_creation_order() -> None:
    made = [ids.new_id("txn") for _ in range(1000)]
    assert all(value.startswith("txn_") and len(value) == 30 for value in made)
    assert made == sorted(made)
    assert len(set(made)) == len(made)
