"""The payment state machine (SPEC §6): the one transition table every status change checks.

    processing -> succeeded | failed | in_doubt
    in_doubt   -> succeeded | failed          (by evidence from the processor only)

`succeeded` and `failed` are terminal. A change not in this table is refused by code, and
applied by a compare-and-set on the stored status, so two actors (the request, a webhook,
a resolver) can never both make the same change.
"""

from __future__ import annotations

from typing import Final

PROCESSING: Final = "processing"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
IN_DOUBT: Final = "in_doubt"

TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        (PROCESSING, SUCCEEDED),
        (PROCESSING, FAILED),
        (PROCESSING, IN_DOUBT),
        (IN_DOUBT, SUCCEEDED),
        (IN_DOUBT, FAILED),
    }
)
TERMINAL: Final = frozenset({SUCCEEDED, FAILED})
UNRESOLVED: Final = frozenset({PROCESSING, IN_DOUBT})


def allowed(from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS
