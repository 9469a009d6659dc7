"""The event types paycore emits (docs/webhooks.md lists each with an example body).

A state change of a payment, refund or payout is `<object>.<state it reached>` (its birth
included: `payment.processing`, `refund.pending`, `payout.scheduled`); a reconciliation
break's are `reconciliation.break_opened`, `_resolved` and `_superseded`; a dispute's (SPEC
§6.2) are `dispute.created`, `dispute.updated` and `dispute.closed` (`disputes.states.event_type`).
A unit test checks this list against every domain's transition table."""

from __future__ import annotations

from typing import Final

PAYMENT_STATES: Final = ("processing", "requires_capture", "succeeded", "failed", "in_doubt", "canceled")
REFUND_STATES: Final = ("requires_approval", "pending", "processing", "succeeded", "failed", "in_doubt", "canceled")
PAYOUT_STATES: Final = (
    "scheduled",
    "queued",
    "processing",
    "in_doubt",
    "sent",
    "settled",
    "failed",
    "returned",
    "canceled",
)
BREAK_EVENTS: Final = ("break_opened", "break_resolved", "break_superseded")
DISPUTE_EVENTS: Final = ("created", "updated", "closed")

EVENT_TYPES: Final[tuple[str, ...]] = (
    *(f"payment.{state}" for state in PAYMENT_STATES),
    *(f"refund.{state}" for state in REFUND_STATES),
    *(f"payout.{state}" for state in PAYOUT_STATES),
    *(f"reconciliation.{name}" for name in BREAK_EVENTS),
    *(f"dispute.{name}" for name in DISPUTE_EVENTS),
)
ALL: Final = "*"
