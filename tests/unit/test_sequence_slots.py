"""`transfer_plan.cut_at_sequences`: a planned answer cut where each entry's sequence number goes,
by a plain split where it finds the places the pattern finds, else by the pattern: the same parts
for every body, a user's text that looks like a slot included."""

from __future__ import annotations

import json

import pytest

from paycore.ledger.transfer_plan import _SEQUENCE_SLOT, cut_at_sequences, joined

COMPACT = (",", ":")  # as paycore renders an answer
BODIES = [
    json.dumps(
        {"entries": [{"account_sequence": 0, "id": "e1"}, {"id": "e2", "account_sequence": 0}]}, separators=COMPACT
    ),
    json.dumps(
        {"metadata": {"x": '","account_sequence":0,"'}, "entries": [{"account_sequence": 0}]}, separators=COMPACT
    ),
    '{"account_sequence":01}',  # not a planned slot: the pattern decides
    '{"entries":[]}',
    "",
]


@pytest.mark.parametrize("body", BODIES)
def test_the_parts_are_the_patterns(body: str) -> None:
    assert cut_at_sequences(body) == tuple(_SEQUENCE_SLOT.split(body))


def test_the_numbers_fill_the_slots() -> None:
    parts = cut_at_sequences(BODIES[0])
    assert len(parts) == 3
    assert json.loads(joined(parts, [7, 9]))["entries"] == [
        {"account_sequence": 7, "id": "e1"},
        {"id": "e2", "account_sequence": 9},
    ]
