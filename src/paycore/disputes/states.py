"""The dispute state machine (SPEC §6.2): the one transition table every status change checks.

    needs_response          -> under_review           (evidence submitted)
    needs_response          -> lost                   (accepted, or the evidence window passed)
    needs_response          -> won                    (the decision arrived before the news of the evidence)
    under_review            -> won | lost             (the network decided)
    warning_needs_response  -> warning_closed         (an inquiry closed: accepted, or won)
    warning_needs_response  -> needs_response | under_review | won | lost
                                                      (the inquiry became a chargeback; the later
                                                      steps when their news came first)

`won`, `lost` and `warning_closed` are terminal. A status only moves along this table, and only
on the processor's word (a webhook, a status query, a report line): anything else that arrives is
older than what paycore holds and is recorded as stale. The processor's statuses are these words.
"""

from __future__ import annotations

from typing import Final

NEEDS_RESPONSE: Final = "needs_response"
UNDER_REVIEW: Final = "under_review"
WON: Final = "won"
LOST: Final = "lost"
WARNING_NEEDS_RESPONSE: Final = "warning_needs_response"
WARNING_CLOSED: Final = "warning_closed"
STATUSES: Final = (NEEDS_RESPONSE, UNDER_REVIEW, WON, LOST, WARNING_NEEDS_RESPONSE, WARNING_CLOSED)

TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        (NEEDS_RESPONSE, UNDER_REVIEW),
        (NEEDS_RESPONSE, LOST),
        (NEEDS_RESPONSE, WON),
        (UNDER_REVIEW, WON),
        (UNDER_REVIEW, LOST),
        (WARNING_NEEDS_RESPONSE, WARNING_CLOSED),
        (WARNING_NEEDS_RESPONSE, NEEDS_RESPONSE),
        (WARNING_NEEDS_RESPONSE, UNDER_REVIEW),
        (WARNING_NEEDS_RESPONSE, WON),
        (WARNING_NEEDS_RESPONSE, LOST),
    }
)
TERMINAL: Final = frozenset({WON, LOST, WARNING_CLOSED})
# A chargeback's statuses: in these the disputed amount and the fee have been withdrawn.
CHARGEBACK: Final = frozenset({NEEDS_RESPONSE, UNDER_REVIEW, WON, LOST})
OPEN: Final = frozenset({NEEDS_RESPONSE, WARNING_NEEDS_RESPONSE})  # evidence or accept are taken


def allowed(from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS


def event_type(from_state: str | None, to_state: str) -> str:
    """The tenant's event for a change (SPEC §6.2): created at birth, closed on a final status."""
    if from_state is None:
        return "dispute.created"
    return "dispute.closed" if to_state in TERMINAL else "dispute.updated"
