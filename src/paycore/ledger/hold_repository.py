"""The SQL a data-plane phase (ADR 0026) runs on SQLite to write a pending hold: each account's
pending totals moved and guarded, the transfer, its two entries. One home for the fixed lists
of `payments/accept_repository.py`, `refunds/create_repository.py` and
`payouts/create_repository.py`; each checks what `APPLY_PENDING` returns with
`paycore.ledger.limits`, as `paycore.ledger.postings._apply` does.

And to resolve one (posted or voided): the resolution made from the hold itself (`RESOLUTION`),
each account's totals moved where the hold has its entry (`RESOLVED_TOTALS`, checked by
`resolution_refusal`), the posted entries (`ENTRY_PAIR`): the statements of
`payments/settle_repository.py`, and, written whole by `resolve`, of a two-entry hold's
resolution (`refunds/settle_repository.py`, `payouts/settle_repository.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db import driver
from paycore.ledger.limits import TOTAL_MINOR_MAX, Totals, bound_before_adding, breaks_no_overdraft, grows_past

# An account's pending totals moved by its entry, bounded before adding (`limits.bound_before_adding`).
APPLY_PENDING = driver.statement(
    "UPDATE ledger_accounts SET debits_pending_minor = debits_pending_minor + ?,"
    " credits_pending_minor = credits_pending_minor + ?, entries_count = entries_count + 1"
    " WHERE tenant_id = ? AND id = ? AND debits_pending_minor <= ? AND credits_pending_minor <= ?"
    " RETURNING code, currency, normal_balance, no_overdraft, system, debits_posted_minor, credits_posted_minor,"
    " debits_pending_minor, credits_pending_minor, entries_count"
)

TRANSFER_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "pending_id",
    "reverses_id",
    "batch_id",
    "idempotency_key",
    "reference_type",
    "reference_id",
    "owner_id",
    "metadata",
    "expires_at_us",
    "created_at_us",
)
TRANSFER = driver.insert("ledger_transfers", TRANSFER_COLUMNS)
_ENTRY_COLUMNS = (
    "tenant_id, id, transfer_id, account_id, direction, amount_minor, currency, account_sequence, created_at_us"
)
ENTRY_PAIR = driver.statement(
    f"INSERT INTO ledger_entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# ------------------------------------------------------------------ a hold resolved
# The accounts as a resolution's UPDATE leaves them, by these names (the ledger's `Account`
# columns): what the ledger's cache of facts keeps (`ledger.remember_accounts`).
ACCOUNT_COLUMNS: Final = (
    "id",
    "code",
    "currency",
    "normal_balance",
    "no_overdraft",
    "system",
    "metadata",
    "created_at_us",
    "debits_posted_minor",
    "credits_posted_minor",
    "debits_pending_minor",
    "credits_pending_minor",
    "entries_count",
)
# Made from the hold itself: it must be its owner's, pending, without expiry, and unresolved
# (the unique (tenant_id, pending_id) index decides, as for the reference path).
# Parameters: resolution id, kind, time, tenant, hold id, owner.
RESOLUTION = driver.statement(
    "INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,"
    " reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)"
    " SELECT tenant_id, ?, ?, id, NULL, NULL, NULL, reference_type, reference_id, owner_id, '{}', NULL, ?"
    " FROM ledger_transfers WHERE tenant_id = ? AND id = ? AND kind = 'pending' AND owner_id = ?"
    " AND expires_at_us IS NULL"
    " ON CONFLICT (tenant_id, pending_id) WHERE pending_id IS NOT NULL DO NOTHING RETURNING id"
)
# Each account's totals, checked against their range before the addition (`bound_before_adding`,
# as `ledger/repository._APPLY_TOTALS`), and only where the hold has this account's entry of
# this amount and side: the release is the hold's, whatever the plan assumed. `{account}`
# names the account (`id = ?`, `code = ?`).
RESOLVED_TOTALS: Final = (
    "UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + ?,"
    " credits_posted_minor = credits_posted_minor + ?, debits_pending_minor = debits_pending_minor + ?,"
    " credits_pending_minor = credits_pending_minor + ?, entries_count = entries_count + ?"
    " WHERE {account} AND tenant_id = ? AND debits_posted_minor <= ? AND credits_posted_minor <= ?"
    " AND debits_pending_minor <= ? AND credits_pending_minor <= ?"
    " AND EXISTS (SELECT 1 FROM ledger_entries WHERE ledger_entries.tenant_id = ledger_accounts.tenant_id"
    " AND ledger_entries.transfer_id = ? AND ledger_entries.account_id = ledger_accounts.id"
    " AND ledger_entries.direction = ? AND ledger_entries.amount_minor = ?)"
    f" RETURNING {', '.join(ACCOUNT_COLUMNS)}"
)


def resolution_refusal(found: SimpleNamespace, amounts: Sequence[int], entries_added: int, currency: str) -> str | None:
    """Why the account `RESOLVED_TOTALS` left as `found`, having added `amounts` (its four
    totals' deltas) and `entries_added` entries, refuses the resolution, as `postings._apply`
    checks it: another currency, the balance limit (only entries move money), an overdraft."""
    if found.currency != currency:
        return f"{found.id} holds {found.currency}, the hold is in {currency}"
    figures = (
        found.debits_posted_minor,
        found.credits_posted_minor,
        found.debits_pending_minor,
        found.credits_pending_minor,
    )
    after = Totals(*figures)
    before = Totals(*(figure - amount for figure, amount in zip(figures, amounts, strict=True)))
    if entries_added and grows_past(before, after, found.normal_balance) is not None:
        return f"{found.id} would pass the balance limit"
    if found.no_overdraft and breaks_no_overdraft(after, found.normal_balance):
        return f"{found.id} would be overdrawn"
    return None


# ------------------------------------------------------------------ a two-entry hold resolved, whole
_BY_ID = driver.statement(RESOLVED_TOTALS.format(account="id = ?"))
_BY_CODE = driver.statement(RESOLVED_TOTALS.format(account="code = ?"))


class Refused(Exception):
    """The resolution would be refused, or could not be made as planned: the caller rolls back
    and its reference path decides."""


@dataclass(frozen=True)
class Resolution:
    """A two-entry hold (`debited_id` debited, the account coded `credited_code` credited,
    `amount_minor` each) posted whole or voided, as a data-plane planner made it."""

    tenant_id: str
    transfer_id: str  # the hold
    owner_id: str  # its owner (the payout, the refund)
    amount_minor: int
    currency: str
    post: bool
    resolution_id: str
    entry_ids: tuple[str, str] | None  # (debit, credit) when posted; None when voided
    debited_id: str
    credited_code: str
    now_us: int

    def deltas(self) -> tuple[Totals, Totals]:
        """What the resolution adds to the debited and the credited account's totals."""
        held, posted = self.amount_minor, self.amount_minor if self.post else 0
        return Totals(posted, 0, -held, 0), Totals(0, posted, 0, -held)


def resolve(connection: Connection, resolution: Resolution) -> list[SimpleNamespace]:
    """Write the resolution inside the caller's transaction, in the reference path's order (the
    resolution, the debited account, the credited one, the posted entries): the two accounts as
    left (`ACCOUNT_COLUMNS`). Raises `Refused` having written what the caller's rollback undoes."""
    assert (resolution.entry_ids is not None) == resolution.post, resolution
    head = (resolution.resolution_id, "post" if resolution.post else "void", resolution.now_us, resolution.tenant_id)
    if not driver.fetch(connection, RESOLUTION, (*head, resolution.transfer_id, resolution.owner_id)):
        raise Refused(f"the hold {resolution.transfer_id} is not {resolution.owner_id}'s pending transfer any more")
    debited_delta, credited_delta = resolution.deltas()
    debited = _apply(connection, resolution, _BY_ID, resolution.debited_id, debited_delta, "debit")
    credited = _apply(connection, resolution, _BY_CODE, resolution.credited_code, credited_delta, "credit")
    if resolution.entry_ids is not None:
        driver.execute(connection, ENTRY_PAIR, _entry_params(resolution, (debited, credited)))
    return [debited, credited]


def _apply(
    connection: Connection, resolution: Resolution, sql: driver.Statement, account: str, delta: Totals, direction: str
) -> SimpleNamespace:
    """The account's totals moved where the hold has its entry, checked (`resolution_refusal`)."""
    amounts = (
        delta.debits_posted_minor,
        delta.credits_posted_minor,
        delta.debits_pending_minor,
        delta.credits_pending_minor,
    )
    added = 1 if resolution.post else 0
    bounds = tuple(bound_before_adding(amount, TOTAL_MINOR_MAX) for amount in amounts)
    hold = (resolution.transfer_id, direction, resolution.amount_minor)
    rows = driver.fetch(connection, sql, (*amounts, added, account, resolution.tenant_id, *bounds, *hold))
    if not rows:
        raise Refused(f"{account}: not the hold's {direction} account, or past the range of a total")
    found = SimpleNamespace(**dict(zip(ACCOUNT_COLUMNS, rows[0], strict=True)))
    refusal = resolution_refusal(found, amounts, added, resolution.currency)
    if refusal is not None:
        raise Refused(refusal)
    return found


def _entry_params(resolution: Resolution, accounts: tuple[SimpleNamespace, SimpleNamespace]) -> list[Any]:
    """The posted entries (debit, credit), each numbered with its account's entry count after
    the UPDATE (one entry added to each)."""
    assert resolution.entry_ids is not None
    params: list[Any] = []
    for entry_id, direction, account in zip(resolution.entry_ids, ("debit", "credit"), accounts, strict=True):
        params += [
            resolution.tenant_id,
            entry_id,
            resolution.resolution_id,
            account.id,
            direction,
            resolution.amount_minor,
            account.currency,
            account.entries_count,
            resolution.now_us,
        ]
    return params


# ------------------------------------------------------------------ a posted entry's account, by its code or id
# A payout's account's totals moved by one posted entry (a settlement: the in-transit account, the
# bank's cash, the fees account; a return: the losses account, and the source by its id), bounded
# before adding as `RESOLVED_TOTALS` is.
_POSTED = (
    "UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + ?,"
    " credits_posted_minor = credits_posted_minor + ?, entries_count = entries_count + 1"
    " WHERE tenant_id = ? AND {account} = ? AND debits_posted_minor <= ? AND credits_posted_minor <= ?"
    f" RETURNING {', '.join(ACCOUNT_COLUMNS)}"
)
_POSTED_BY = {column: driver.statement(_POSTED.format(account=column)) for column in ("code", "id")}


def post_to_code(
    connection: Connection,
    tenant_id: str,
    code: str,
    direction: str,
    amount_minor: int,
    currency: str,
    *,
    by: str = "code",
) -> SimpleNamespace:
    """Add one posted entry of `amount_minor` to the account with `code` (or, `by="id"`, that
    id), checked as a resolution's account is (`resolution_refusal`): the account as left
    (`ACCOUNT_COLUMNS`), its `entries_count` the entry's number. Raises `Refused` (no such
    account, a total's range, the balance limit, an overdraft) having written what the caller's
    rollback undoes."""
    assert direction in ("debit", "credit") and amount_minor > 0, (direction, amount_minor)
    debit = amount_minor if direction == "debit" else 0
    amounts = (debit, amount_minor - debit, 0, 0)
    bounds = tuple(bound_before_adding(amount, TOTAL_MINOR_MAX) for amount in amounts[:2])
    rows = driver.fetch(connection, _POSTED_BY[by], (*amounts[:2], tenant_id, code, *bounds))
    if not rows:
        raise Refused(f"{code}: no such account, or past the range of a total")
    found = SimpleNamespace(**dict(zip(ACCOUNT_COLUMNS, rows[0], strict=True)))
    refusal = resolution_refusal(found, amounts, 1, currency)
    if refusal is not None:
        raise Refused(refusal)
    return found
