"""The payment state machine (SPEC §6, §6.1): the one transition table every status change checks.

    processing       -> succeeded | failed | in_doubt | requires_capture | canceled
    in_doubt         -> succeeded | failed | requires_capture | canceled   (by evidence only)
    requires_capture -> processing  (a capture or cancel sent: `Payment.operation` says which)
    requires_capture -> succeeded | canceled   (evidence of a capture, cancel or expiry)
    processing       -> requires_capture       (the processor refused the capture or cancel:
                                                it did nothing, the authorization stays open)

A manual payment is authorized (`requires_capture`), then captured (`succeeded`) or canceled
(`canceled`, by request or by the processor's expiry). Its capture and cancel go out as its
charge did: `processing` while the call is in flight, `in_doubt` when the answer is lost, and
out of it only by evidence. `succeeded`, `failed` and `canceled` are terminal.

A change not in this table is refused by code, and applied by a compare-and-set on the stored
status, so two actors (the request, a webhook, a resolver) can never both make the same change.
"""

from __future__ import annotations

from typing import Final

PROCESSING: Final = "processing"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
IN_DOUBT: Final = "in_doubt"
REQUIRES_CAPTURE: Final = "requires_capture"
CANCELED: Final = "canceled"

# The calls sent on an authorization (`Payment.operation`, the API's `in_doubt_operation`).
CAPTURE: Final = "capture"
CANCEL: Final = "cancel"
# Why a manual payment was canceled (`cancellation_reason`).
REQUESTED: Final = "requested"
EXPIRED: Final = "expired"

TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        (PROCESSING, SUCCEEDED),
        (PROCESSING, FAILED),
        (PROCESSING, IN_DOUBT),
        (IN_DOUBT, SUCCEEDED),
        (IN_DOUBT, FAILED),
        (PROCESSING, REQUIRES_CAPTURE),
        (PROCESSING, CANCELED),
        (IN_DOUBT, REQUIRES_CAPTURE),
        (IN_DOUBT, CANCELED),
        (REQUIRES_CAPTURE, PROCESSING),
        (REQUIRES_CAPTURE, SUCCEEDED),
        (REQUIRES_CAPTURE, CANCELED),
    }
)
TERMINAL: Final = frozenset({SUCCEEDED, FAILED, CANCELED})
UNRESOLVED: Final = frozenset({PROCESSING, IN_DOUBT})


def allowed(from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS
