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


def limited_figures(totals: Totals, normal_balance: str) -> dict[str, int]:
    """The figures the balance limit bounds (docs/ledger.md, "The balance limit"): the three
    the API reports, and `posted` plus the incoming holds, which is the most `posted` can
    become when they are posted, so that bounding it at a hold's creation means no post is
    ever refused for the limit (a post often records money the processor already moved)."""
    balance = balance_of(totals, normal_balance)
    incoming = totals.credits_pending_minor if normal_balance == "credit" else totals.debits_pending_minor
    return {
        "posted": balance.posted_minor,
        "pending": balance.pending_minor,
        "available": balance.available_minor,
        "posted plus incoming holds": balance.posted_minor + incoming,
    }


def grows_past(before: Totals, after: Totals, normal_balance: str, limit: int) -> str | None:
    """The first limited figure that a transfer carries past `limit` in absolute value while
    moving it away from zero, or None.

    A figure that moves toward zero is never refused, so an account already past the limit
    (old data, an operator's hand edit) can always be brought back."""
    old, new = limited_figures(before, normal_balance), limited_figures(after, normal_balance)
    for name, value in new.items():
        if abs(value) > limit and abs(value) > abs(old[name]):
            return name
    return None
