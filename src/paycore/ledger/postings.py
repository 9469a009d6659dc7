"""How a transfer is written: the checks that refuse it whole, its rows, and the totals it
applies to each account under that account's row lock. Internal to the ledger: callers use
`paycore.ledger.service`."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from paycore.kit import ids
from paycore.kit.errors import InvalidAmount
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import repository
from paycore.ledger.accounts import load_account_facts
from paycore.ledger.balances import Totals
from paycore.ledger.errors import (
    AccountNotFound,
    BalanceLimitExceeded,
    BalanceOverflow,
    CurrencyMismatch,
    InsufficientFunds,
    InvalidEntries,
    PartialPostUnsupported,
    PostAmountExceedsPending,
    SystemAccount,
    TransferNotPending,
    UnbalancedTransfer,
)
from paycore.ledger.limits import BALANCE_LIMIT_MINOR, TOTAL_MINOR_MAX, breaks_no_overdraft, grows_past
from paycore.ledger.types import DIRECTIONS, REFERENCE_TYPES, Account, Entry, EntrySpec, Transfer, TransferSpec


def check_spec(
    connection: Connection,
    tenant_id: str,
    spec: TransferSpec,
    prefix: str,
    known_accounts: Mapping[str, Account] | None = None,
) -> dict[str, Account]:
    """Refuse a transfer that could never apply (`check_entries`), its accounts' facts read
    where neither `known_accounts` nor this process's cache has them."""
    _check_entry_count(spec, prefix)
    wanted = {e.account_id for e in spec.entries}
    if known_accounts is not None and wanted <= known_accounts.keys():
        account_rows = {account_id: known_accounts[account_id] for account_id in wanted}
    else:
        account_rows = load_account_facts(connection, tenant_id, wanted)
    check_entries(spec, account_rows, prefix)
    return account_rows


def _check_entry_count(spec: TransferSpec, prefix: str) -> None:
    if len(spec.entries) < 2:
        raise InvalidEntries("a transfer needs at least two entries", param=f"{prefix}entries")


def check_entries(spec: TransferSpec, account_rows: Mapping[str, Account], prefix: str) -> None:
    """Refuse a transfer that could never apply: unknown accounts (not in `account_rows`), mixed
    currencies, entries that do not balance per currency, or a system account moved by a
    transfer no flow owns (the database refuses that entry too: migration 0024). Pure: the one
    home of these rules for the reference path and the data plane's planner
    (`ledger/transfer_plan.py`)."""
    _check_entry_count(spec, prefix)
    sums: dict[str, int] = defaultdict(int)
    debits: dict[str, int] = defaultdict(int)
    for index, entry in enumerate(spec.entries):
        assert entry.direction in DIRECTIONS and 0 < entry.amount_minor <= AMOUNT_MINOR_MAX
        row = account_rows.get(entry.account_id)
        if row is None:
            raise AccountNotFound(f"no account {entry.account_id!r}", param=f"{prefix}entries[{index}].account_id")
        if row.system and spec.owner_id is None:
            raise SystemAccount(
                f"account {row.id} ({row.code}) is paycore's own: only paycore's flows move money on it",
                param=f"{prefix}entries[{index}].account_id",
            )
        if spec.currency is not None and row.currency != spec.currency:
            raise CurrencyMismatch(
                f"account {row.id} holds {row.currency}, not {spec.currency}",
                param=f"{prefix}currency",
            )
        sums[row.currency] += entry.amount_minor if entry.direction == "debit" else -entry.amount_minor
        if entry.direction == "debit":
            debits[row.currency] += entry.amount_minor
    for currency, total in debits.items():
        # The transfer's amount is rendered as one JSON integer: it must be exact for every client.
        if total > AMOUNT_MINOR_MAX:
            raise InvalidAmount(
                f"the debits in {currency} add up to {total}, more than 2^53 - 1", param=f"{prefix}entries"
            )
    for currency, difference in sums.items():
        if difference != 0:
            raise UnbalancedTransfer(
                f"debits and credits in {currency} differ by {abs(difference)}",
                param=f"{prefix}entries",
            )


def transfer_values(
    tenant_id: str,
    transfer_id: str,
    kind: str,
    spec: TransferSpec,
    now_us: int,
    idempotency_key: str | None,
    batch_id: str | None,
) -> dict[str, Any]:
    assert spec.reference_type in REFERENCE_TYPES, spec.reference_type
    return {
        "tenant_id": tenant_id,
        "id": transfer_id,
        "kind": kind,
        "pending_id": None,
        "reverses_id": None,
        "batch_id": batch_id,
        "idempotency_key": idempotency_key,
        "reference_type": spec.reference_type,
        "reference_id": spec.reference_id,
        "owner_id": spec.owner_id,
        "metadata": json.dumps(spec.metadata, sort_keys=True) if spec.metadata else "{}",
        "expires_at_us": spec.expires_at_us if spec.pending else None,
        "created_at_us": now_us,
    }


def write_entries(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    specs: Sequence[EntrySpec],
    account_rows: Mapping[str, Account],
    now_us: int,
    *,
    pending: bool = False,
    released: Sequence[Entry] = (),
    prefix: str = "",
    guarded: Sequence[str] = (),
    overdraft_allowed: bool = False,
) -> list[dict[str, Any]]:
    """Apply the entries' (and any released hold's) totals to their accounts, then insert the
    entries numbered with each account's next sequence numbers, which the balance UPDATE hands
    out under the account's row lock."""
    new_deltas, added = entry_totals(specs, pending=pending)
    deltas = _merge(_release(released), new_deltas)
    counts = _apply(connection, tenant_id, account_rows, deltas, added, prefix, frozenset(guarded), overdraft_allowed)
    next_sequence = {account_id: counts[account_id] - added[account_id] + 1 for account_id in added}
    rows = []
    for spec in specs:
        rows.append(entry_row(tenant_id, transfer_id, spec, account_rows, next_sequence[spec.account_id], now_us))
        next_sequence[spec.account_id] += 1
    repository.insert_entries(connection, rows)
    return rows


def write_entries_of_transfers(
    connection: Connection,
    tenant_id: str,
    transfers: Sequence[tuple[str, Sequence[EntrySpec]]],
    account_rows: Mapping[str, Account],
    now_us: int,
) -> list[dict[str, Any]]:
    """The entries of several posted transfers, (transfer id, entries) each, written at once:
    each account's totals are updated once, by the sum of its entries in all of them (its
    row lock taken once, in sorted order like every transfer), and its entries are numbered
    in the order of `transfers`.

    The flags and the balance limit are checked on the sums. That is the same as checking
    each transfer in turn only when every account is moved one way (all its entries debits,
    or all credits): then no transfer in between carries a figure further than the last one
    does. So that is required here."""
    specs = [spec for _, entries in transfers for spec in entries]
    directions = {(spec.account_id, spec.direction) for spec in specs}
    assert len(directions) == len({account_id for account_id, _ in directions}), "an account moved both ways"
    deltas, added = entry_totals(specs, pending=False)
    counts = _apply(connection, tenant_id, account_rows, deltas, added, "")
    next_sequence = {account_id: counts[account_id] - added[account_id] + 1 for account_id in added}
    rows = []
    for transfer_id, entries in transfers:
        for spec in entries:
            rows.append(entry_row(tenant_id, transfer_id, spec, account_rows, next_sequence[spec.account_id], now_us))
            next_sequence[spec.account_id] += 1
    repository.insert_entries(connection, rows)
    return rows


def entry_row(
    tenant_id: str,
    transfer_id: str,
    spec: EntrySpec,
    account_rows: Mapping[str, Account],
    account_sequence: int,
    now_us: int,
    entry_id: str | None = None,
) -> dict[str, Any]:
    """One entry's row, with `entry_id` (a new id when None)."""
    return {
        "tenant_id": tenant_id,
        "id": ids.new_id("ent") if entry_id is None else entry_id,
        "transfer_id": transfer_id,
        "account_id": spec.account_id,
        "direction": spec.direction,
        "amount_minor": spec.amount_minor,
        "currency": account_rows[spec.account_id].currency,
        "account_sequence": account_sequence,
        "created_at_us": now_us,
    }


def entry_totals(specs: Sequence[EntrySpec], *, pending: bool) -> tuple[dict[str, Totals], dict[str, int]]:
    """What the entries add to each account: its four totals, and its number of entries."""
    added: dict[str, int] = defaultdict(int)
    for spec in specs:
        added[spec.account_id] += 1
    return _deltas(specs, pending=pending), dict(added)


def resolution_totals(
    released: Sequence[Entry], specs: Sequence[EntrySpec]
) -> tuple[dict[str, Totals], dict[str, int]]:
    """What a hold's resolution adds to each account: its `released` entries' pending totals
    taken back, its posted `specs` (none for a void) added; and each account's new entries. As
    `write_entries` applies them with `released`; the data plane's planner's
    (`ledger/resolve_plan.py`)."""
    posted, added = entry_totals(specs, pending=False)
    return _merge(_release(released), posted), added


def _deltas(specs: Sequence[EntrySpec], *, pending: bool) -> dict[str, Totals]:
    sums: dict[str, list[int]] = {}  # per account: [debits, credits], summed before the Totals are made
    for spec in specs:
        debit = spec.amount_minor if spec.direction == "debit" else 0
        pair = sums.setdefault(spec.account_id, [0, 0])
        pair[0] += debit
        pair[1] += spec.amount_minor - debit
    if pending:
        return {account_id: Totals(0, 0, debit, credit) for account_id, (debit, credit) in sums.items()}
    return {account_id: Totals(debit, credit, 0, 0) for account_id, (debit, credit) in sums.items()}


def _release(pending_entries: Sequence[Entry]) -> dict[str, Totals]:
    deltas: dict[str, Totals] = {}
    for entry in pending_entries:
        debit = entry.amount_minor if entry.direction == "debit" else 0
        deltas = _merge(deltas, {entry.account_id: Totals(0, 0, -debit, -(entry.amount_minor - debit))})
    return deltas


def _merge(left: dict[str, Totals], right: dict[str, Totals]) -> dict[str, Totals]:
    merged = dict(left)
    for account_id, delta in right.items():
        base = merged.get(account_id, Totals(0, 0, 0, 0))
        merged[account_id] = Totals(
            base.debits_posted_minor + delta.debits_posted_minor,
            base.credits_posted_minor + delta.credits_posted_minor,
            base.debits_pending_minor + delta.debits_pending_minor,
            base.credits_pending_minor + delta.credits_pending_minor,
        )
    return merged


def _apply(
    connection: Connection,
    tenant_id: str,
    account_rows: Mapping[str, Account],
    deltas: dict[str, Totals],
    added: Mapping[str, int],
    prefix: str,
    guarded: frozenset[str] = frozenset(),
    overdraft_allowed: bool = False,
) -> dict[str, int]:
    """Update cached totals and entry counts in sorted account order (no deadlocks), each
    checked by `apply_account`. Returns each account's entry count after this transfer."""
    counts = {}
    for account_id in sorted(deltas.keys() | added.keys()):
        row = account_rows[account_id]
        counts[account_id] = apply_account(
            connection,
            tenant_id,
            account_id,
            deltas.get(account_id, Totals(0, 0, 0, 0)),
            added.get(account_id, 0),
            normal_balance=row.normal_balance,
            guarded=(row.no_overdraft and not overdraft_allowed) or account_id in guarded,
            prefix=prefix,
        )
    return counts


def apply_account(
    connection: Connection,
    tenant_id: str,
    account_id: str,
    delta: Totals,
    entries_added: int,
    *,
    normal_balance: str,
    guarded: bool,
    prefix: str,
) -> int:
    """Add `delta` and `entries_added` to one account's cached totals and entry count, and
    enforce the flags (`guarded`: its no_overdraft flag, or the transfer's guard) and the
    2^53 - 1 balance limit (`paycore.ledger.limits`) on the totals the database returns, under
    the row lock the UPDATE took. The one home of these checks for the reference path and the
    ledger transfer's data plane on SQLite (`ledger/transfer_repository.py`). Returns the
    account's entry count after this transfer."""
    applied = repository.apply_totals(connection, tenant_id, account_id, delta, entries_added, TOTAL_MINOR_MAX)
    if applied is None:
        if repository.get_account(connection, tenant_id, account_id) is None:
            raise AccountNotFound(f"no account {account_id!r}", param=f"{prefix}entries")
        raise overflow_refusal(account_id, prefix)
    totals, count = applied
    assert all(type(value) is int and 0 <= value <= TOTAL_MINOR_MAX for value in vars(totals).values())
    assert count >= entries_added, (account_id, count, entries_added)
    if entries_added:  # only entries move money: releasing a hold is never refused
        _check_balance_limit(account_id, _minus(totals, delta), totals, normal_balance, prefix)
    if guarded and breaks_no_overdraft(totals, normal_balance):
        raise overdraft_refusal(account_id, prefix)
    return int(count)


def _check_balance_limit(account_id: str, before: Totals, after: Totals, normal_balance: str, prefix: str) -> None:
    """docs/ledger.md, "The balance limit": posted, pending and available stay within 2^53 - 1
    (the rule: `paycore.ledger.limits`)."""
    figure = grows_past(before, after, normal_balance, BALANCE_LIMIT_MINOR)
    if figure is not None:
        raise limit_refusal(account_id, figure, prefix)


# The refusals of the three limits (paycore.ledger.limits), one text each for every path that
# applies them (this module, and a batch's: paycore.ledger.batch).


def overflow_refusal(account_id: str, prefix: str) -> BalanceOverflow:
    return BalanceOverflow(f"account {account_id} would exceed its balance range", param=f"{prefix}entries")


def limit_refusal(account_id: str, figure: str, prefix: str) -> BalanceLimitExceeded:
    return BalanceLimitExceeded(
        f"account {account_id} would have a {figure} balance past 2^53 - 1", param=f"{prefix}entries"
    )


def overdraft_refusal(account_id: str, prefix: str) -> InsufficientFunds:
    return InsufficientFunds(f"account {account_id} has insufficient available funds", param=f"{prefix}entries")


def _minus(totals: Totals, delta: Totals) -> Totals:
    return Totals(
        totals.debits_posted_minor - delta.debits_posted_minor,
        totals.credits_posted_minor - delta.credits_posted_minor,
        totals.debits_pending_minor - delta.debits_pending_minor,
        totals.credits_pending_minor - delta.credits_pending_minor,
    )


def insert_resolution(
    connection: Connection,
    tenant_id: str,
    resolution_id: str,
    kind: str,
    pending: Transfer,
    now_us: int,
) -> None:
    values = {
        "tenant_id": tenant_id,
        "id": resolution_id,
        "kind": kind,
        "pending_id": pending.id,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": pending.reference_type,
        "reference_id": pending.reference_id,
        "owner_id": pending.owner_id,  # a hold's resolution is its owner's
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": now_us,
    }
    if not repository.insert_resolution(connection, values):
        raise TransferNotPending("the transfer was resolved by a concurrent request")


def post_entries(pending: Transfer, amount_minor: int | None) -> tuple[EntrySpec, ...]:
    full = tuple(EntrySpec(e.account_id, e.direction, e.amount_minor) for e in pending.entries)
    total = sum(e.amount_minor for e in pending.entries if e.direction == "debit")
    if amount_minor is None or amount_minor == total:
        return full
    if not 0 < amount_minor <= AMOUNT_MINOR_MAX:
        raise InvalidAmount("amount_minor must be a positive integer", param="amount_minor")
    if amount_minor > total:
        raise PostAmountExceedsPending(f"cannot post {amount_minor} of a {total} hold", param="amount_minor")
    if len(pending.entries) != 2:
        raise PartialPostUnsupported("only a two-entry hold can be posted partially", param="amount_minor")
    return tuple(EntrySpec(e.account_id, e.direction, amount_minor) for e in pending.entries)
