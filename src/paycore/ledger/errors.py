"""The ledger's typed errors. Their HTTP statuses are chosen in `paycore.http.errors`."""

from __future__ import annotations

from paycore.kit.errors import BusinessRefusal, Conflict, Forbidden, InvalidRequest, NotFound


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


class ManagedTransfer(Conflict):
    """The transfer belongs to a flow (a payment, refund, payout, credit, or the processor's
    fees booked by a reconciliation run): only that flow posts, voids or reverses it, as its
    state machine decides. `owner_id` names the flow's object."""

    code = "managed_transfer"
    recorded = True


class SystemAccount(Forbidden):
    """The account is one of paycore's own (the chart of accounts: processor and bank clearing,
    fees, payouts in transit, credits): only paycore's flows move money on it, and its codes
    are not the tenant's to create."""

    code = "system_account"
