"""A batch of transfers written at once (`service.create_batch`).

The reference is a loop of `service.create_transfer`, one transfer after the other in the
caller's transaction: about seven statements each. This writes the same rows, numbered the
same way, refused by the same rules with the same errors, in a fixed number of statements:

- every transfer is checked first (`postings.check_spec`: accounts, currencies, balance), its
  accounts read once for the whole batch;
- the batch is planned as *moves*, each transfer's change to each of its accounts, in the
  batch's order and in each transfer its accounts' sorted order (the lock order of every
  transfer): the reference path applies exactly these, one after the other;
- PostgreSQL: one call of `paycore_create_batch` (migration 0019) locks the accounts, finds
  the first move the limits refuse and otherwise writes everything; SQLite (one writer, the
  write lock held since BEGIN IMMEDIATE): the moves are checked here on the totals read, with
  the rules of `paycore.ledger.limits`, then each account is updated once and the rows are
  inserted by multi-row statements.

A batch under an idempotency key (`POST /v1/transfers/batch`) is written by
`ledger.batch_keyed`, which uses the same plan: on PostgreSQL with its key in the one call
(migration 0050), on SQLite by `apply_moves` (each account updated first, then the moves
checked on the totals before) and the key's claim with its answer before the INSERTs.

A refusal is the reference path's own error, naming the transfer (`transfers[3].entries`).
The reference path refused transfers in order, so a transfer that fails `check_spec` after
one that the limits refuse must not hide it: the transfers before it are applied first.
Every error leaves rows written in the caller's transaction, as the reference path did:
the caller rolls it back (all or nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import batch_repository, repository
from paycore.ledger.accounts import load_account_facts
from paycore.ledger.balances import Totals
from paycore.ledger.errors import AccountNotFound
from paycore.ledger.limits import (
    BALANCE_LIMIT_MINOR,
    TOTAL_MINOR_MAX,
    bound_before_adding,
    breaks_no_overdraft,
    grows_past,
    limited_figures,
)
from paycore.ledger.postings import (
    check_spec,
    entry_row,
    entry_totals,
    limit_refusal,
    overdraft_refusal,
    overflow_refusal,
    transfer_values,
)
from paycore.ledger.types import Account, Transfer, TransferSpec, new_transfer_view

# Transfers per call of `paycore_create_batch`: bounds one statement's parameters (about 30
# values per two-entry transfer). A larger batch is written by several calls, in order, in
# the same transaction.
TRANSFERS_PER_CALL_MAX = 10_000
# The figures of the balance limit, in the order `paycore_balance_figures` returns them.
_FIGURES = tuple(limited_figures(Totals(0, 0, 0, 0), "credit"))


@dataclass(frozen=True)
class _Move:
    transfer: int  # position in the batch
    account_id: str
    delta: Totals
    added: int  # entries
    guard: str | None  # the normal balance of an account that must keep available >= 0


@dataclass
class BatchPlan:
    """What a part of the batch writes: rows with every entry's sequence number 0 (handed out
    when written), and the moves, in the order they apply."""

    transfers: list[dict[str, Any]] = field(default_factory=list)
    entries: list[list[dict[str, Any]]] = field(default_factory=list)  # per transfer
    entry_moves: list[list[int]] = field(default_factory=list)  # per transfer: each entry's move
    moves: list[_Move] = field(default_factory=list)


def write_batch(
    connection: Connection, tenant_id: str, specs: Sequence[TransferSpec], *, now_us: int, batch_id: str
) -> list[Transfer]:
    """Write the transfers of `specs` as one batch, all or none (see the module)."""
    wanted = {entry.account_id for spec in specs for entry in spec.entries}
    accounts = load_account_facts(connection, tenant_id, wanted)
    for index, spec in enumerate(specs):
        try:
            check_spec(connection, tenant_id, spec, f"transfers[{index}].", accounts)
        except DomainError:
            _write_parts(connection, tenant_id, specs[:index], accounts, now_us, batch_id)  # an earlier refusal first
            raise
    return _write_parts(connection, tenant_id, specs, accounts, now_us, batch_id)


def _write_parts(
    connection: Connection,
    tenant_id: str,
    specs: Sequence[TransferSpec],
    accounts: Mapping[str, Account],
    now_us: int,
    batch_id: str,
) -> list[Transfer]:
    created: list[Transfer] = []
    for start in range(0, len(specs), TRANSFERS_PER_CALL_MAX):
        plan = plan_batch(tenant_id, specs[start : start + TRANSFERS_PER_CALL_MAX], start, accounts, now_us, batch_id)
        if connection.dialect.name == "postgresql":
            number_entries(plan, _write_on_postgresql(connection, tenant_id, plan, now_us, batch_id))
        else:
            _write_on_sqlite(connection, tenant_id, plan, accounts)
        created.extend(
            new_transfer_view(values, rows) for values, rows in zip(plan.transfers, plan.entries, strict=True)
        )
    return created


def plan_batch(
    tenant_id: str,
    specs: Sequence[TransferSpec],
    offset: int,
    accounts: Mapping[str, Account],
    now_us: int,
    batch_id: str,
) -> BatchPlan:
    plan = BatchPlan()
    transfer_ids = iter(ids.new_ids("txn", len(specs)))
    entry_ids = iter(ids.new_ids("ent", sum(len(spec.entries) for spec in specs)))
    for index, spec in enumerate(specs, start=offset):
        transfer_id = next(transfer_ids)
        kind = "pending" if spec.pending else "transfer"
        plan.transfers.append(transfer_values(tenant_id, transfer_id, kind, spec, now_us, None, batch_id))
        deltas, added = entry_totals(spec.entries, pending=spec.pending)
        guarded = frozenset(spec.guard_available)
        move_of = {}
        for account_id in sorted(added):  # the lock order of every transfer
            account = accounts[account_id]
            guard = account.normal_balance if account.no_overdraft or account_id in guarded else None
            move_of[account_id] = len(plan.moves)
            plan.moves.append(_Move(index, account_id, deltas[account_id], added[account_id], guard))
        plan.entries.append(
            [entry_row(tenant_id, transfer_id, e, accounts, 0, now_us, next(entry_ids)) for e in spec.entries]
        )
        plan.entry_moves.append([move_of[e.account_id] for e in spec.entries])
    return plan


def number_entries(plan: BatchPlan, first_sequences: Sequence[int]) -> None:
    """Number the entries from each move's first sequence number, in entry order."""
    next_sequence = list(first_sequences)
    for rows, moves in zip(plan.entries, plan.entry_moves, strict=True):
        for row, move in zip(rows, moves, strict=True):
            row["account_sequence"] = next_sequence[move]
            next_sequence[move] += 1


def _write_on_postgresql(
    connection: Connection, tenant_id: str, plan: BatchPlan, now_us: int, batch_id: str
) -> list[int]:
    """One call; each move's first sequence number."""
    params = [tenant_id, batch_id, now_us, *call_arrays(plan)]
    first_sequences, refused, account_id, refusal = batch_repository.create_batch_call(connection, params)
    if first_sequences is None:
        raise _refusal(refusal, account_id, first_transfer(plan) + refused)
    assert len(first_sequences) == len(plan.moves), (len(first_sequences), len(plan.moves))
    return first_sequences


def first_transfer(plan: BatchPlan) -> int:
    """The batch position of the plan's first transfer (a part of a larger batch starts later)."""
    return plan.moves[0].transfer if plan.moves else 0


def call_arrays(plan: BatchPlan) -> list[Any]:
    """`paycore_create_batch`'s arrays (migration 0019's order, after the tenant, the batch's id
    and the clock): the transfers, the accounts in lock order, the moves, the entries."""
    account_ids = sorted({move.account_id for move in plan.moves})
    position = {account_id: number for number, account_id in enumerate(account_ids, start=1)}
    first = first_transfer(plan)
    entries = [row for rows in plan.entries for row in rows]
    entry_moves = [move for moves in plan.entry_moves for move in moves]
    return [
        [values["id"] for values in plan.transfers],
        [values["kind"] for values in plan.transfers],
        [values["reference_type"] for values in plan.transfers],
        [values["reference_id"] for values in plan.transfers],
        [values["metadata"] for values in plan.transfers],
        [values["expires_at_us"] for values in plan.transfers],
        account_ids,
        [move.transfer - first + 1 for move in plan.moves],
        [position[move.account_id] for move in plan.moves],
        [move.delta.debits_posted_minor for move in plan.moves],
        [move.delta.credits_posted_minor for move in plan.moves],
        [move.delta.debits_pending_minor for move in plan.moves],
        [move.delta.credits_pending_minor for move in plan.moves],
        [move.added for move in plan.moves],
        [move.guard for move in plan.moves],
        [row["id"] for row in entries],
        [move + 1 for move in entry_moves],
        [row["direction"] for row in entries],
        [row["amount_minor"] for row in entries],
    ]


def _refusal(refusal: str, account_id: str, transfer: int) -> DomainError:
    prefix = f"transfers[{transfer}]."
    if refusal == "overflow":
        return overflow_refusal(account_id, prefix)
    if refusal == "insufficient":
        return overdraft_refusal(account_id, prefix)
    if refusal == "not_found":
        return AccountNotFound(f"no account {account_id!r}", param=f"{prefix}entries")
    kind, _, figure = refusal.partition(":")
    assert kind == "limit", refusal
    return limit_refusal(account_id, _FIGURES[int(figure) - 1], prefix)


def _write_on_sqlite(connection: Connection, tenant_id: str, plan: BatchPlan, accounts: Mapping[str, Account]) -> None:
    """Check the moves in order on the totals read under the write lock; then one UPDATE per
    account and multi-row INSERTs."""
    rows = repository.get_accounts(connection, tenant_id, {move.account_id for move in plan.moves})
    totals = {
        account_id: Totals(
            row.debits_posted_minor, row.credits_posted_minor, row.debits_pending_minor, row.credits_pending_minor
        )
        for account_id, row in rows.items()
    }
    counts = {account_id: int(row.entries_count) for account_id, row in rows.items()}
    started = dict(totals)
    first = []
    for move in plan.moves:
        if move.account_id not in rows:  # a cached id of a transaction that rolled back
            raise AccountNotFound(f"no account {move.account_id!r}", param=f"transfers[{move.transfer}].entries")
        totals[move.account_id] = _checked(move, totals[move.account_id], accounts[move.account_id].normal_balance)
        first.append(counts[move.account_id] + 1)
        counts[move.account_id] += move.added
    for account_id in sorted(totals):
        before, after = started[account_id], totals[account_id]
        delta = Totals(*(a - b for a, b in zip(vars(after).values(), vars(before).values(), strict=True)))
        added = counts[account_id] - int(rows[account_id].entries_count)
        applied = repository.apply_totals(connection, tenant_id, account_id, delta, added, TOTAL_MINOR_MAX)
        assert applied == (after, counts[account_id]), (account_id, applied)  # the lock was held throughout
    number_entries(plan, first)
    batch_repository.insert_transfers(connection, plan.transfers)
    repository.insert_entries(connection, [row for rows in plan.entries for row in rows])


def _checked(move: _Move, before: Totals, normal_balance: str) -> Totals:
    """The account's totals after the move, or the refusal of the first limit it breaks, in
    the order `postings._apply` checks them."""
    old, delta = vars(before).values(), vars(move.delta).values()
    if any(total > bound_before_adding(change) for total, change in zip(old, delta, strict=True)):
        raise overflow_refusal(move.account_id, f"transfers[{move.transfer}].")
    after = _plus(before, move.delta)
    figure = grows_past(before, after, normal_balance, BALANCE_LIMIT_MINOR)
    if figure is not None:
        raise limit_refusal(move.account_id, figure, f"transfers[{move.transfer}].")
    if move.guard is not None and breaks_no_overdraft(after, move.guard):
        raise overdraft_refusal(move.account_id, f"transfers[{move.transfer}].")
    return after


def apply_moves(
    connection: Connection, tenant_id: str, plan: BatchPlan, accounts: Mapping[str, Account]
) -> list[int] | None:
    """SQLite's data plane (`batch_keyed`), inside the caller's write transaction: each account's
    totals and entry count updated once by the batch's sums (`apply_totals`: the reference
    path's UPDATE with RETURNING, in id order), then the moves checked in order on the totals
    before (after less the sums) with the rules `_checked` applies. Each move's first sequence
    number; None on a refusal (an account not found, a total past its range, a limit), having
    written what the caller's rollback undoes: the reference path then decides and words it."""
    sums: dict[str, tuple[Totals, int]] = {}
    for move in plan.moves:
        delta, added = sums.get(move.account_id, (Totals(0, 0, 0, 0), 0))
        sums[move.account_id] = (_plus(delta, move.delta), added + move.added)
    before: dict[str, Totals] = {}
    counts: dict[str, int] = {}
    for account_id in sorted(sums):  # the lock order of every transfer
        delta, added = sums[account_id]
        applied = repository.apply_totals(connection, tenant_id, account_id, delta, added, TOTAL_MINOR_MAX)
        if applied is None:
            return None
        after, count = applied
        before[account_id] = Totals(*(a - d for a, d in zip(vars(after).values(), vars(delta).values(), strict=True)))
        counts[account_id] = count - added
    totals = dict(before)
    first = []
    for move in plan.moves:
        try:
            totals[move.account_id] = _checked(move, totals[move.account_id], accounts[move.account_id].normal_balance)
        except DomainError:
            return None
        first.append(counts[move.account_id] + 1)
        counts[move.account_id] += move.added
    assert all(_plus(before[a], sums[a][0]) == totals[a] for a in sums), "the moves add up to the sums written"
    return first


def _plus(totals: Totals, delta: Totals) -> Totals:
    return Totals(
        totals.debits_posted_minor + delta.debits_posted_minor,
        totals.credits_posted_minor + delta.credits_posted_minor,
        totals.debits_pending_minor + delta.debits_pending_minor,
        totals.credits_pending_minor + delta.credits_pending_minor,
    )
