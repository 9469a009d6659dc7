"""The SQL of a payout's settlement on SQLite (ADR 0026 step 3): a fixed list of statements sending
a `settlement_plan.Move` as it is. On PostgreSQL the same move is migration
`*_inbound_payout_settlement.py`'s `paycore_inbound_settle_payout`.

The reference path's order: the payout's compare-and-set (as read: its status, time, attempts,
bank reference, batch and failure code, since the state event's snapshot is made from that
read), the transfers (one INSERT), each entry's account by its code (`ledger.hold_repository.
post_to_code`: its totals, checked as a hold's resolution checks them, which hand out the
entries' numbers), the entries (one INSERT), the state event, then the bank's fee: its adjustment
(none where the payout has one already: nothing written, the reference path decides) and its
audit event. A payout moved first leaves nothing written (None); whatever else would refuse
raises `Refused` for the caller's rollback, and the reference path decides. A payout still
waiting moves to `sent` first, by its settle's list. The postings and the bank's adjustments are
a return's too (`return_repository.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.ledger.hold_repository import TRANSFER_COLUMNS, Refused, post_to_code
from paycore.payouts import settle_repository
from paycore.payouts.settle_plan import as_read
from paycore.payouts.settle_repository import Accounts
from paycore.payouts.settlement_plan import WRITTEN_COLUMNS, Move, PlannedEntry, TwoSteps
from paycore.payouts.types import Payout

_ENTRY_COLUMNS: Final = (
    "tenant_id",
    "id",
    "transfer_id",
    "account_id",
    "direction",
    "amount_minor",
    "currency",
    "account_sequence",
    "created_at_us",
)
_ADJUSTMENT_COLUMNS: Final = (
    "tenant_id",
    "id",
    "payout_id",
    "kind",
    "amount_minor",
    "currency",
    "code",
    "effective_on",
    "source",
    "dedupe_key",
    "transfer_id",
    "note",
    "created_at_us",
)

_CAS = driver.statement(
    f"UPDATE payouts SET {', '.join(f'{column} = ?' for column in WRITTEN_COLUMNS)}"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND attempts = ? AND bank_reference IS ?"
    " AND batch_id IS ? AND failure_code IS ? RETURNING amount_minor, currency"
)
# A settlement's one or two transfers, a return's one or two; their 2 to 5 entries.
_TRANSFERS = {rows: driver.insert("ledger_transfers", TRANSFER_COLUMNS, rows) for rows in (1, 2)}
_ENTRIES = {rows: driver.insert("ledger_entries", _ENTRY_COLUMNS, rows) for rows in (2, 3, 4, 5)}
_ADJUSTMENTS = {
    rows: driver.statement(
        f"{driver.insert('payout_adjustments', _ADJUSTMENT_COLUMNS, rows).sqlite} ON CONFLICT DO NOTHING RETURNING id"
    )
    for rows in (1, 2)
}
_EVENTS = {rows: driver.insert("events", EVENT_COLUMNS, rows) for rows in (1, 2)}


def write_move(connection: Connection, move: Move | TwoSteps) -> Accounts | None:
    """Write a payout's settlement inside the caller's transaction: its accounts as left once
    written; None (nothing written) when the compare-and-set found the payout moved. A waiting
    payout's first step is its settle's list (`settle_repository.write_move`). Raises `Refused`
    having written what the caller's rollback undoes."""
    if isinstance(move, TwoSteps):
        return settle_repository.write_steps(connection, move, settle_repository.write_move, write_move)
    accepted, changes = move.accepted, move.changes
    expected = as_read(accepted)
    values = [changes[column] for column in WRITTEN_COLUMNS]
    found = driver.fetch(connection, _CAS, (*values, accepted.tenant_id, accepted.id, *expected))
    if not found:
        return None
    assert found[0] == (accepted.amount_minor, accepted.currency), "the payout moved is the payout planned"
    accounts = post(connection, accepted, move.transfers, move.entries)
    settle_repository.write_state_event(connection, move.state_event)
    if move.adjustment is not None and move.adjustment_event is not None:
        adjust(connection, accepted, (move.adjustment,), (move.adjustment_event,))
    return accounts


def post(
    connection: Connection, payout: Payout, transfers: Sequence[dict[str, Any]], entries: Sequence[PlannedEntry]
) -> Accounts:
    """The payout's posted transfers (one INSERT), each entry's account by its code or id (in the
    reference path's order: each transfer's accounts, then the next's), the entries (one INSERT):
    the accounts as left."""
    rows = [[transfer[name] for name in TRANSFER_COLUMNS] for transfer in transfers]
    driver.execute(connection, _TRANSFERS[len(rows)], [value for row in rows for value in row])
    times = {transfer["id"]: transfer["created_at_us"] for transfer in transfers}
    values: list[Any] = []
    accounts = {}
    for entry in entries:
        by, key = ("code", entry.account_code) if entry.account_id is None else ("id", entry.account_id)
        assert key is not None, entry
        account = post_to_code(
            connection, payout.tenant_id, key, entry.direction, entry.amount_minor, payout.currency, by=by
        )
        accounts[account.id] = account
        values += [payout.tenant_id, entry.id, entry.transfer_id, account.id, entry.direction]
        values += [entry.amount_minor, account.currency, account.entries_count, times[entry.transfer_id]]
    driver.execute(connection, _ENTRIES[len(entries)], values)
    return list(accounts.values())


def adjust(
    connection: Connection, payout: Payout, adjustments: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]
) -> None:
    """The bank's adjustments of the payout (one INSERT; none written where the payout has one of
    the same key already: `Refused`, the reference path decides) and their audit events (one)."""
    rows = [[adjustment[name] for name in _ADJUSTMENT_COLUMNS] for adjustment in adjustments]
    added = driver.fetch(connection, _ADJUSTMENTS[len(rows)], [value for row in rows for value in row])
    if len(added) != len(rows):
        raise Refused(f"payout {payout.id} has one of these adjustments already")
    values = [event.get(name) for event in events for name in EVENT_COLUMNS]
    driver.execute(connection, _EVENTS[len(events)], values)
