"""The limits on an account's balance: the one home of the rule (docs/ledger.md, "The balance
limit" and "Flags"). Pure functions and constants, no I/O.

Three bounds hold on every account a transfer writes:

1. **The range of a total** (`TOTAL_MINOR_MAX`): each of the four cached totals lives in a
   signed 64-bit column, and is checked against its bound *before* the addition
   (`bound_before_adding`), since the addition itself would fail on PostgreSQL and become a REAL
   on SQLite. Refused as `balance_overflow`.
2. **The balance limit** (`BALANCE_LIMIT_MINOR`, 2^53 - 1): posted, pending, available and
   posted plus incoming holds (`limited_figures`) may not move away from zero past it
   (`grows_past`). Refused as `balance_limit_exceeded`.
3. **No overdraft**: an account flagged `no_overdraft` (or guarded by the transfer) keeps
   available >= 0 (`breaks_no_overdraft`). Refused as `insufficient_funds`.

Where the copies are, and why they exist. A transfer on PostgreSQL is one server call (ADR
0011: the hot account's row lock is held only inside the server), so the rule is also written
in SQL that this module cannot generate:

- `paycore.ledger.postings._apply` (the reference path, both databases) calls the functions
  here on the totals the UPDATE returns;
- `paycore.ledger.repository._APPLY_TOTALS` checks bound 1 in its WHERE clause, with the bounds
  `bound_before_adding` computes;
- PostgreSQL's `paycore_create_transfer` (migration 0009, its body replaced by migration 0010)
  checks all three (`total_max`, `balance_max`, `p_guard`), with the figures of
  `paycore_balance_figures` (migration 0010). Migrations are history and never change, so a
  change to this rule needs a new migration that replaces the function;
- PostgreSQL's `paycore_create_batch` (migration 0019) checks all three on a batch's running
  totals (`total_max`, `balance_max` with `paycore_balance_figures`, `p_guard`), and
  `paycore.ledger.batch._checked` does on SQLite, with the functions here; both are held to
  the reference path by `tests/integration/ledger/test_batch.py`;
- a credit on the data plane (ADR 0026): PostgreSQL's `paycore_credits_create` (migration 0026)
  checks all three as `paycore_create_transfer` does, and `paycore.credits.create_repository`
  on SQLite with the functions here; both leave the refusal to the reference path, and
  `tests/integration/http/test_credits.py` (a balance taken past the limit) holds them to it;
- a payment's accept on the data plane (ADR 0026 step 3): PostgreSQL's `paycore_payments_accept`
  (migration 0027) checks all three on the hold's pending totals, and
  `paycore.payments.accept_repository` on SQLite with the functions here; both leave the
  refusal to the reference path;
- a payout's creation on the data plane (ADR 0026 step 3): PostgreSQL's `paycore_payouts_create`
  (migration `*_payouts_create.py`) checks all three on the hold's pending totals, the overdraft
  rule on a flagged account and on the source (the hold's guard), and
  `paycore.payouts.create_repository` on SQLite with the functions here; both leave the refusal
  to the reference path;
- a refund's creating phase on the data plane (ADR 0026 step 3): PostgreSQL's
  `paycore_refunds_create` checks all three on the hold's pending totals, and
  `paycore.refunds.create_repository` on SQLite with the functions here; both leave the
  refusal to the reference path.

A ledger transfer on the data plane (ADR 0026) adds no copy: on PostgreSQL it is still
`paycore_create_transfer`'s call, and its SQLite list (`paycore.ledger.transfer_repository`)
applies each account with `paycore.ledger.postings.apply_account`, the reference path's own.

A payout's cancel on the data plane (`paycore_payouts_cancel`, `paycore.payouts.cancel_repository`)
copies none of them: a void only lowers the hold's pending totals by what the hold added, which
no limit refuses (`postings._apply` checks the balance limit only where entries are added, and
a released hold only raises what is available), so there is nothing of it to hold to this module.

`tests/integration/ledger/test_limit_copies.py` holds every copy to this module: it reads the
functions `paycore_create_transfer`, `paycore_payments_accept`, `paycore_payouts_create` and
`paycore_refunds_create` as they stand in a migrated PostgreSQL database (`pg_proc`), evaluates
their bounds, figures and refusal conditions against the functions here, and runs
`_APPLY_TOTALS` at the bound on both databases; a change to one copy without the others fails
it. The invariant check
`balance_over_max` (`paycore.invariants.checks`) reports accounts already past the limit, with
BALANCE_LIMIT_MINOR as its bound (checked by the same test).
"""

from __future__ import annotations

from typing import Final

from paycore.kit.money import AMOUNT_MINOR_MAX, BALANCE_MINOR_MAX
from paycore.ledger.balances import Totals as Totals  # the figures these rules take
from paycore.ledger.balances import balance_of

# Bound 1: each cached total is a signed 64-bit column on both databases.
TOTAL_MINOR_MAX: Final = BALANCE_MINOR_MAX
# Bound 2: the largest integer every JSON client (JavaScript included) reads exactly.
BALANCE_LIMIT_MINOR: Final = AMOUNT_MINOR_MAX


def bound_before_adding(delta_minor: int, total_max: int = TOTAL_MINOR_MAX) -> int:
    """The largest value a total may hold for `delta_minor` to be added to it within
    `total_max` (bound 1); a total that is not growing is bounded by `total_max` itself."""
    return total_max - delta_minor if delta_minor > 0 else total_max


def breaks_no_overdraft(totals: Totals, normal_balance: str) -> bool:
    """Bound 3: available < 0, refused on a `no_overdraft` or guarded account."""
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


def grows_past(before: Totals, after: Totals, normal_balance: str, limit: int = BALANCE_LIMIT_MINOR) -> str | None:
    """Bound 2: the first limited figure that a transfer carries past `limit` in absolute value
    while moving it away from zero, or None.

    A figure that moves toward zero is never refused, so an account already past the limit
    (old data, an operator's hand edit) can always be brought back."""
    if min(vars(after).values()) >= 0 and max(vars(after).values()) <= limit // 2:
        # Each figure is one total less another, or two totals less a third (available,
        # posted plus incoming holds): with every total in [0, limit / 2] none is past `limit`.
        return None
    old, new = limited_figures(before, normal_balance), limited_figures(after, normal_balance)
    for name, value in new.items():
        if abs(value) > limit and abs(value) > abs(old[name]):
            return name
    return None
