"""Balance arithmetic on an account's four cached totals (pure functions, no I/O).

For a credit-normal account (a liability such as a merchant's balance):
    posted    = credits_posted - debits_posted
    pending   = credits_pending - debits_pending   (net effect if every hold were posted)
    available = posted - debits_pending            (incoming holds are not spendable yet)
A debit-normal account is the mirror image. `no_overdraft` means available >= 0.
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


def breaks_no_overdraft(totals: Totals, normal_balance: str) -> bool:
    return balance_of(totals, normal_balance).available_minor < 0


def grows_past(before: Totals, after: Totals, normal_balance: str, limit: int) -> str | None:
    """The first reported figure (`posted`, `pending`, `available`) that a transfer carries past
    `limit` in absolute value while moving it away from zero, or None.

    A figure that moves toward zero is never refused, so an account already past the limit
    (old data, an operator's hand edit) can always be brought back."""
    old, new = balance_of(before, normal_balance), balance_of(after, normal_balance)
    for name in ("posted", "pending", "available"):
        value = abs(getattr(new, f"{name}_minor"))
        if value > limit and value > abs(getattr(old, f"{name}_minor")):
            return name
    return None
