"""A ledger transfer, planned (ADR 0026): pure functions from the request to the rows to write.

In: the key's scope (tenant, key, fingerprint, clock), the transfer's spec (what
`schemas.to_spec` made of the body), the facts of its accounts (this process's cache, ADR
0007), the new ids, and the renderer of the answer. Out: a `Plan` holding the transfer's row,
its entries' rows, each account's move in id order (the write's lock order) with what the
write must check under that account's row lock (the 64-bit range of a total, the balance
limit, no overdraft where the account is flagged or guarded), and the answer's body cut where
each entry's sequence number goes. No I/O here.

The sequence numbers are the only thing the write hands out: each account's entry count,
under its row lock. The answer is built from the plan and those numbers, never read back:
PostgreSQL's `paycore_create_transfer` (ADR 0011) returns them, SQLite's fixed list
(`transfer_repository.py`) has them from its UPDATEs' RETURNING.

The request's rules are `postings.check_entries`'s (the one home the reference path uses too):
the planner raises the same refusals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger.balances import Totals
from paycore.ledger.postings import check_entries, entry_row, entry_totals, transfer_values
from paycore.ledger.types import Account, Transfer, TransferSpec, new_transfer_view

STATUS_CREATED = 201
# An entry's sequence number in the rendered body, planned as 0 (sequences start at 1). The
# pattern cannot match inside a JSON string, where every quote is escaped; metadata values are
# strings, so no user value renders as a bare number there.
_SEQUENCE_SLOT = re.compile(r'(?<="account_sequence":)0(?=[,}])')
_SLOT_TEXT = '"account_sequence":'

Render = Callable[[Transfer], str]


@dataclass(frozen=True)
class NewIds:
    transfer_id: str
    entry_ids: tuple[str, ...]  # one for each of the spec's entries, in order


@dataclass(frozen=True)
class AccountMove:
    """One account's part of the write, made and checked under its row lock."""

    account_id: str
    delta: Totals  # what its entries add to its four totals
    entries_added: int
    normal_balance: str
    guarded: bool  # available may not go below zero: its no_overdraft flag, or the transfer's guard


@dataclass(frozen=True)
class Plan:
    scope: KeyScope
    transfer_row: dict[str, Any]
    entry_rows: tuple[dict[str, Any], ...]  # each `account_sequence` 0: the write numbers them
    moves: tuple[AccountMove, ...]  # in account id order: every transfer's lock order
    answer_status: int
    answer_parts: tuple[str, ...]  # the body, cut at each entry's sequence number

    def sequences(self, counts: Mapping[str, int]) -> list[int]:
        """Each entry's sequence number, in entry order, from each account's entry count after
        the write (as `postings.write_entries` numbers them)."""
        next_sequence = {}
        for move in self.moves:
            assert counts[move.account_id] >= move.entries_added, move
            next_sequence[move.account_id] = counts[move.account_id] - move.entries_added + 1
        numbers = []
        for row in self.entry_rows:
            numbers.append(next_sequence[row["account_id"]])
            next_sequence[row["account_id"]] += 1
        return numbers

    def numbered_entries(self, sequences: Sequence[int]) -> list[dict[str, Any]]:
        assert len(sequences) == len(self.entry_rows) and all(number >= 1 for number in sequences)
        return [{**row, "account_sequence": number} for row, number in zip(self.entry_rows, sequences, strict=True)]

    def answer(self, sequences: Sequence[int]) -> Outcome:
        """The answer, the sequence numbers filled in."""
        return Outcome(self.answer_status, joined(self.answer_parts, sequences))


def cut_at_sequences(body: str) -> tuple[str, ...]:
    """`body` cut at each planned sequence number (`_SEQUENCE_SLOT`). The plain text split finds
    the same places when each is followed by `,` or `}` (a batch's body of 100 transfers: about
    40 µs against 800 for the pattern); anything else is cut by the pattern itself."""
    parts = body.split(_SLOT_TEXT + "0")
    if all(part[:1] in (",", "}") for part in parts[1:]):
        return (*(part + _SLOT_TEXT for part in parts[:-1]), parts[-1])
    return tuple(_SEQUENCE_SLOT.split(body))


def joined(parts: Sequence[str], sequences: Sequence[int]) -> str:
    """A body cut at each entry's sequence number (`cut_at_sequences`), the numbers filled in."""
    assert len(sequences) == len(parts) - 1 and all(number >= 1 for number in sequences)
    return parts[0] + "".join(str(number) + part for number, part in zip(sequences, parts[1:], strict=True))


def plan_transfer(
    scope: KeyScope,
    spec: TransferSpec,
    accounts: Mapping[str, Account],
    *,
    new_ids: NewIds,
    render: Render,
    reverses_id: str | None = None,
) -> Plan | None:
    """The rows of one transfer and its answer. Raises the request's refusal as the reference
    path does (`accounts` lacking one of the spec's is `AccountNotFound`); None when `render`
    is a renderer this module cannot cut (the reference path then renders). `reverses_id`: the
    transfer this one reverses (`ledger/resolve_plan.py`), whose row holds no key, as
    `service.reverse_transfer` writes it."""
    check_entries(spec, accounts, "")
    assert len(new_ids.entry_ids) == len(spec.entries)
    assert reverses_id is None or not spec.pending, "a reversal is posted"
    tenant_id, now_us = scope.tenant_id, scope.now_us
    kind = "pending" if spec.pending else "transfer"
    key = scope.key if reverses_id is None else None
    values = transfer_values(tenant_id, new_ids.transfer_id, kind, spec, now_us, key, None)
    values["reverses_id"] = reverses_id
    entry_rows = tuple(
        entry_row(tenant_id, new_ids.transfer_id, entry, accounts, 0, now_us, entry_id=entry_id)
        for entry, entry_id in zip(spec.entries, new_ids.entry_ids, strict=True)
    )
    parts = cut_at_sequences(render(new_transfer_view(values, entry_rows)))
    if len(parts) != len(entry_rows) + 1:
        return None
    deltas, added = entry_totals(spec.entries, pending=spec.pending)
    guard = frozenset(spec.guard_available)
    moves = tuple(
        AccountMove(
            account_id,
            deltas[account_id],
            added[account_id],
            accounts[account_id].normal_balance,
            accounts[account_id].no_overdraft or account_id in guard,
        )
        for account_id in sorted(added)
    )
    plan = Plan(scope, values, entry_rows, moves, STATUS_CREATED, parts)
    _check_plan(plan)
    return plan


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the entries balance per currency (as `check_entries` refused
    otherwise), and the moves add exactly the entries, each account once, in id order."""
    pending = plan.transfer_row["kind"] == "pending"
    sums: dict[str, int] = {}
    for row in plan.entry_rows:
        assert 0 < row["amount_minor"] <= AMOUNT_MINOR_MAX and row["account_sequence"] == 0
        signed = row["amount_minor"] if row["direction"] == "debit" else -row["amount_minor"]
        sums[row["currency"]] = sums.get(row["currency"], 0) + signed
    assert all(total == 0 for total in sums.values()), "a transfer's entries sum to zero in each currency"
    ids = [move.account_id for move in plan.moves]
    assert ids == sorted(set(ids)), "each account once, in id order"
    assert sum(move.entries_added for move in plan.moves) == len(plan.entry_rows)
    debits = sum(row["amount_minor"] for row in plan.entry_rows if row["direction"] == "debit")
    moved = [vars(move.delta) for move in plan.moves]
    posted = sum(d["debits_posted_minor"] + d["credits_posted_minor"] for d in moved)
    held = sum(d["debits_pending_minor"] + d["credits_pending_minor"] for d in moved)
    assert (posted, held) == ((0, 2 * debits) if pending else (2 * debits, 0))
