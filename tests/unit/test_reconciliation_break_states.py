"""A break's transition table and its resolutions, without a database."""

from __future__ import annotations

import itertools

import pytest

from paycore.reconciliation import states


@pytest.mark.parametrize(("from_status", "to_status"), list(itertools.product(states.STATUSES, repeat=2)))
def test_only_an_open_break_moves_and_only_to_a_final_status(from_status: str, to_status: str) -> None:
    expected = from_status == states.OPEN and to_status in (states.RESOLVED, states.SUPERSEDED)
    assert states.allowed(from_status, to_status) is expected


def test_the_final_statuses_never_move_again() -> None:
    assert {states.RESOLVED, states.SUPERSEDED} == states.TERMINAL
    assert not any(states.allowed(final, to) for final in states.TERMINAL for to in states.STATUSES)


def test_the_resolutions_are_the_documented_set_and_each_status_has_its_event() -> None:
    assert states.RESOLUTIONS == ("accepted", "adjusted", "processor_corrected", "written_off")
    assert set(states.EVENT_TYPES) == set(states.STATUSES)
    assert all(name.startswith("reconciliation.break_") for name in states.EVENT_TYPES.values())
