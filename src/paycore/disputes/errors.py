"""Typed errors of disputes; their HTTP statuses are mapped in `paycore.http`."""

from __future__ import annotations

from paycore.kit.errors import Conflict, NotFound


class DisputeNotFound(NotFound):
    code = "dispute_not_found"


class DisputeNotOpen(Conflict):
    """Only a dispute in `needs_response` or `warning_needs_response` (without evidence yet)
    takes evidence or an accept (details: the current dispute)."""

    code = "dispute_not_open"
    recorded = True  # a business refusal: the key replays it


class AcceptPending(Conflict):
    """Another person's accept of the dispute already waits for an approver (`approvals`)."""

    code = "accept_pending"


class AcceptNotRequested(Conflict):
    """No accept of the dispute waits for approval: nothing to approve or cancel."""

    code = "accept_not_requested"
