"""Balance arithmetic on an account's four cached totals (pure functions, no I/O).

For a credit-normal account (a liability such as a merchant's balance):
    posted    = credits_posted - debits_posted
    pending   = credits_pending - debits_pending   (net effect if every hold were posted)
    available = posted - debits_pending            (incoming holds are not spendable yet)
A debit-normal account is the mirror image. The limits on these figures (no overdraft, the
2^53 - 1 balance limit) are in `paycore.ledger.limits`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Totals:
    debits_posted_minor: int
    credits_posted_minor: int
    debits_pending_minor: int
    credits_pending_minor: int


@dataclass(frozen=True)
class Balance:
    posted_minor: int
    pending_minor: int
    available_minor: int


def balance_of(totals: Totals, normal_balance: str) -> Balance:
    if normal_balance == "credit":
        posted = totals.credits_posted_minor - totals.debits_posted_minor
        pending = totals.credits_pending_minor - totals.debits_pending_minor
        available = posted - totals.debits_pending_minor
    else:
        assert normal_balance == "debit", normal_balance
        posted = totals.debits_posted_minor - totals.credits_posted_minor
        pending = totals.debits_pending_minor - totals.credits_pending_minor
        available = posted - totals.credits_pending_minor
    return Balance(posted_minor=posted, pending_minor=pending, available_minor=available)
