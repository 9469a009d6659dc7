"""The ledger's typed errors. Their HTTP statuses are chosen in `paycore.http.errors`."""

from __future__ import annotations

from paycore.kit.errors import BusinessRefusal, Conflict, InvalidRequest, NotFound


class AccountNotFound(NotFound):
    code = "account_not_found"


class TransferNotFound(NotFound):
    code = "transfer_not_found"


class AccountExists(Conflict):
    code = "account_exists"
    recorded = True


class InsufficientFunds(BusinessRefusal):
    code = "insufficient_funds"


class UnbalancedTransfer(BusinessRefusal):
    code = "unbalanced_transfer"


class CurrencyMismatch(BusinessRefusal):
    code = "currency_mismatch"


class PostAmountExceedsPending(BusinessRefusal):
    code = "post_amount_exceeds_pending"


class PartialPostUnsupported(BusinessRefusal):
    code = "partial_post_unsupported"


class BalanceOverflow(BusinessRefusal):
    code = "balance_overflow"


class BalanceLimitExceeded(BusinessRefusal):
    """An account's posted, pending or available balance would pass 2^53 - 1 (docs/ledger.md)."""

    code = "balance_limit_exceeded"


class TransferNotPending(Conflict):
    code = "transfer_not_pending"
    recorded = True


class TransferExpired(Conflict):
    code = "transfer_expired"
    recorded = True


class TransferNotReversible(Conflict):
    code = "transfer_not_reversible"
    recorded = True


class InvalidEntries(InvalidRequest):
    code = "invalid_entries"


class FeeKeyTaken(Conflict):
    """A processor fee's key names a transfer of the tenant that is not a processor fee
    (a client chose that key for a transfer of its own): the fee cannot be booked under it."""

    code = "fee_key_taken"
