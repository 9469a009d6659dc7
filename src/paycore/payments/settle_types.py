"""What a payment's settle plans and writes (ADR 0026 step 3): the shapes its planners
(`move_plan.py`, `settle_plan.py`, `capture_plan.py`) build and its writers
(`settle_repository.py`, `capture_repository.py`) send. No planning here.

`Move`: a payment's move out of `processing` or `in_doubt`, what every settle writes (the
compare-and-set, the hold's resolution, the state event); `Plan`: a move with the call that
proved it and the request's answer (the creating request's settle, a capture's finish). The
new ids a move takes, each account's deltas, the planned entries, the hold's three fates and
the columns the compare-and-set may write. Its own module so that the planners and the
writers import the shapes without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.idempotency.service import Outcome
from paycore.ledger.limits import Totals
from paycore.payments.types import Payment

# The payment's columns the compare-and-set writes, each from the planned payment: every
# column a move to a terminal state changes (`Machine.changes`, asserted by `move_plan.check_move`).
WRITTEN_COLUMNS: Final = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "processor_reference",
    "failure_code",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    # An authorization's (`lifecycle.authorization_values`): None for an automatic payment.
    "amount_capturable_minor",
    "amount_captured_minor",
    "authorization_expires_at_us",
    "cancellation_reason",
)
# A worker round's move writes its schedule with it (`in_doubt.plane`): the round's `attempts`
# too. Not every settle's: the creating request's settle writes the payment as its accept phase
# wrote it, and a round may have counted an attempt since.
ROUND_COLUMNS: Final = (*WRITTEN_COLUMNS, "attempts")
# The hold at this phase: posted (succeeded), voided (failed), or kept pending (requires_capture).
POST: Final = "post"
VOID: Final = "void"
KEEP: Final = "keep"


@dataclass(frozen=True)
class NewIds:
    call_event_id: str
    state_event_id: str
    resolution_id: str
    debit_entry_id: str  # the processor clearing account's entry (posted only)
    credit_entry_id: str  # the destination account's entry (posted only)


@dataclass(frozen=True)
class AccountMove:
    """What the phase adds to one account: its four totals and its number of entries."""

    delta: Totals
    entries_added: int


@dataclass(frozen=True)
class PlannedEntry:
    id: str
    direction: str
    amount_minor: int


@dataclass(frozen=True)
class Move:
    """A payment's move out of `processing` or `in_doubt` to what the processor proved: the
    compare-and-set, the hold's resolution and the state event. What every settle writes: the
    creating request's and a capture's (`Plan`, with their call and answer), and a webhook's
    (`inbound/apply_payment.py`, with the stored event)."""

    accepted: Payment  # as read (or as the accept phase wrote it): what the compare-and-set expects
    payment: Payment  # as the compare-and-set leaves it
    expected_status: str
    hold: str  # POST (succeeded), VOID (failed) or KEEP (requires_capture: the authorization stays open)
    state_event: dict[str, Any]  # the state change's row (`lifecycle.recording.event_row`)
    resolution_id: str
    clearing_code: str  # the processor clearing account's code: the hold's debited account
    clearing: AccountMove
    destination: AccountMove
    entries: tuple[PlannedEntry, ...]  # (clearing debit, destination credit) when posted; none when voided

    @property
    def post(self) -> bool:
        return self.hold == POST

    @property
    def resolution_kind(self) -> str:
        assert self.hold != KEEP, "an open authorization's hold is not resolved"
        return self.hold


@dataclass(frozen=True)
class Plan(Move):
    call_event: dict[str, Any]  # the call's audit row (`lifecycle.calls.event_row`)
    answer: Outcome
    answer_key: str  # whose answer: the creating request's key here, a capture's its own (capture_plan.py)
