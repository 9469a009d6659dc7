"""An account's statement with a running balance (the console's account page): each line of a
page beside the account's posted balance once that line was committed.

The balance before a page's first line is read in one aggregate statement, from the nearer end
of the account's history: the entries before the page summed (a page near the start), or the
account's posted totals less the entries after the page (a page near the end). Either read is a
range of the entries' (tenant_id, account_id, account_sequence) index, at most
`BALANCE_ENTRIES_READ_MAX` entries; a page farther than that from both ends shows no running
balance rather than a slow page (reached only by following about 400 pages of 50 from an end).
A hold's entry (a pending transfer's) leaves the posted balance as it was: it counts in pending
until its post, which is a line of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.ledger import statement_repository as repository
from paycore.ledger.types import Entry

BALANCE_ENTRIES_READ_MAX: Final = 20_000


@dataclass(frozen=True)
class Line:
    entry: Entry
    posted: bool  # False: a hold's entry (in pending until its post)
    balance_minor: int | None  # the posted balance after this line; None: not computed (see above)


def _signed(normal_balance: str, debits_minor: int, credits_minor: int) -> int:
    """A balance in the account's normal direction (`ledger.balances.balance_of`'s posted)."""
    return credits_minor - debits_minor if normal_balance == "credit" else debits_minor - credits_minor


def opening_balance(
    connection: Connection, tenant_id: str, account_id: str, normal_balance: str, after_sequence: int
) -> tuple[int | None, int, int]:
    """(the posted balance after entry `after_sequence`, or None past the bound; the account's
    posted balance now; its entry count now), the last two read together."""
    facts = repository.statement_facts(connection, tenant_id, account_id)
    assert facts is not None, account_id  # the caller found the account
    posted_now = _signed(normal_balance, facts.debits_posted_minor, facts.credits_posted_minor)
    count = int(facts.entries_count)
    before, after = after_sequence, max(count - after_sequence, 0)
    if after_sequence == 0:
        return 0, posted_now, count
    if min(before, after) > BALANCE_ENTRIES_READ_MAX:
        return None, posted_now, count
    if before <= after:
        debits, credits = repository.posted_between(
            connection, tenant_id, account_id, after_sequence=0, through_sequence=after_sequence
        )
        return _signed(normal_balance, debits, credits), posted_now, count
    debits, credits = repository.posted_between(
        connection, tenant_id, account_id, after_sequence=after_sequence, through_sequence=count
    )
    return posted_now - _signed(normal_balance, debits, credits), posted_now, count


def lines(
    connection: Connection,
    tenant_id: str,
    account_id: str,
    normal_balance: str,
    page: Sequence[Entry],
    kinds: Mapping[str, str],
) -> list[Line]:
    """The page's entries (in sequence order) with the running balance; `kinds`: each entry's
    transfer kind by transfer id (`transfer`, `pending`, `post`)."""
    if not page:
        return []
    first = page[0].account_sequence
    balance, posted_now, count = opening_balance(connection, tenant_id, account_id, normal_balance, first - 1)
    shown: list[Line] = []
    for entry in page:
        assert entry.account_sequence >= first, (entry.id, first)
        posted = kinds.get(entry.transfer_id) != "pending"
        if balance is not None and posted:
            debit = entry.amount_minor if entry.direction == "debit" else 0
            balance += _signed(normal_balance, debit, entry.amount_minor - debit)
        if balance is not None and entry.account_sequence == count:
            # The pair of the totals: the running sum meets the account's own posted balance.
            assert balance == posted_now, (account_id, balance, posted_now)
        shown.append(Line(entry, posted, balance))
    return shown
