"""The dispute's transition table (SPEC §6.2, disputes/states.py) and the event types it
publishes, which the tenants' webhook endpoints may subscribe to."""

from __future__ import annotations

import itertools

from paycore.disputes import states
from paycore.processor.port import DISPUTE_STATUSES
from paycore.webhooks.events import EVENT_TYPES


def test_the_table_joins_only_known_statuses_and_nothing_leaves_a_final_one() -> None:
    assert set(states.STATUSES) == set(DISPUTE_STATUSES)  # the processor's words are paycore's
    for from_state, to_state in states.TRANSITIONS:
        assert {from_state, to_state} <= set(states.STATUSES)
        assert from_state not in states.TERMINAL
        assert from_state != to_state


def test_the_spec_s_paths_are_allowed_and_no_step_goes_back() -> None:
    for path in (
        ("needs_response", "under_review", "won"),
        ("needs_response", "under_review", "lost"),
        ("needs_response", "lost"),
        ("warning_needs_response", "warning_closed"),
        ("warning_needs_response", "needs_response", "under_review", "won"),
    ):
        assert all(states.allowed(a, b) for a, b in itertools.pairwise(path)), path
    for backwards in (
        ("under_review", "needs_response"),
        ("won", "lost"),
        ("needs_response", "warning_needs_response"),
    ):
        assert not states.allowed(*backwards), backwards


def test_every_change_publishes_a_type_tenants_can_subscribe_to() -> None:
    assert states.event_type(None, "needs_response") == "dispute.created"
    assert states.event_type("needs_response", "under_review") == "dispute.updated"
    assert {states.event_type("under_review", final) for final in states.TERMINAL} == {"dispute.closed"}
    assert {"dispute.created", "dispute.updated", "dispute.closed"} <= set(EVENT_TYPES)
