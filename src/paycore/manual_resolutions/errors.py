from __future__ import annotations

from paycore.kit.errors import Conflict, InvalidRequest, NotFound


class InvalidKind(InvalidRequest):
    code = "invalid_kind"


class InvalidOutcome(InvalidRequest):
    code = "invalid_outcome"


class InvalidEvidence(InvalidRequest):
    code = "invalid_evidence"


class ItemNotFound(NotFound):
    code = "not_found"


class ResolutionNotFound(NotFound):
    code = "resolution_not_found"


class NotEligible(Conflict):
    """The item cannot be resolved by hand (details: `status`): it does not wait on the
    processor, or has not waited long enough and no open reconciliation break names it."""

    code = "not_eligible"


class ResolutionPending(Conflict):
    """A proposal for the item waits for a second person already."""

    code = "resolution_pending"


class ResolutionNotProposed(Conflict):
    """The proposal was confirmed or rejected already (details: `status`)."""

    code = "resolution_not_proposed"
