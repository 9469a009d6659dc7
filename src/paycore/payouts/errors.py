"""The payout errors and their stable codes (docs/errors.md)."""

from __future__ import annotations

from paycore.kit.errors import Conflict, InvalidRequest, NotFound


class PayoutNotFound(NotFound):
    code = "payout_not_found"


class PayoutNotCancelable(Conflict):
    """The payout has been claimed by a worker or has moved on (details: status)."""

    code = "payout_not_cancelable"


class InvalidBeneficiary(InvalidRequest):
    code = "invalid_beneficiary"


class InvalidIban(InvalidRequest):
    code = "invalid_iban"


class InvalidBic(InvalidRequest):
    code = "invalid_bic"


class InvalidRoutingNumber(InvalidRequest):
    code = "invalid_routing_number"


class InvalidAccountNumber(InvalidRequest):
    code = "invalid_account_number"


class UnsupportedRailCurrency(InvalidRequest):
    code = "unsupported_rail_currency"


class InvalidExecuteOn(InvalidRequest):
    code = "invalid_execute_on"


class InvalidEffectiveOn(InvalidRequest):
    code = "invalid_effective_on"


class SourceAccountNotFound(NotFound):
    code = "account_not_found"


class AdjustmentNotAllowed(Conflict):
    """This adjustment does not fit the payout's state (details: status)."""

    code = "adjustment_not_allowed"
