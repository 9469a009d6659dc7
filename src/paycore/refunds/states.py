"""The refund state machine (SPEC §7.1): the one transition table every status change checks.

    requires_approval -> pending | canceled        (a person approves or cancels)
    pending    -> processing                        (a worker sends it to the processor)
    pending    -> succeeded | failed                (the processor's result arrives first:
                                                     a settlement report, a replayed result)
    processing -> succeeded | failed | in_doubt
    in_doubt   -> succeeded | failed                (by evidence from the processor only)

`succeeded`, `failed` and `canceled` are terminal. Every status but `failed` and `canceled`
holds its amount against the payment (rule zero); those two release it.
"""

from __future__ import annotations

from typing import Final

REQUIRES_APPROVAL: Final = "requires_approval"
PENDING: Final = "pending"
PROCESSING: Final = "processing"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
IN_DOUBT: Final = "in_doubt"
CANCELED: Final = "canceled"
STATUSES: Final = (REQUIRES_APPROVAL, PENDING, PROCESSING, SUCCEEDED, FAILED, IN_DOUBT, CANCELED)

TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        (REQUIRES_APPROVAL, PENDING),
        (REQUIRES_APPROVAL, CANCELED),
        (PENDING, PROCESSING),
        (PENDING, SUCCEEDED),
        (PENDING, FAILED),
        (PROCESSING, SUCCEEDED),
        (PROCESSING, FAILED),
        (PROCESSING, IN_DOUBT),
        (IN_DOUBT, SUCCEEDED),
        (IN_DOUBT, FAILED),
    }
)
TERMINAL: Final = frozenset({SUCCEEDED, FAILED, CANCELED})
RELEASED: Final = frozenset({FAILED, CANCELED})  # no longer counted against the payment
UNRESOLVED: Final = frozenset({PROCESSING, IN_DOUBT})  # sent, no final answer yet


def allowed(from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS
