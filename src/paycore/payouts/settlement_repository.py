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
raises `Refused` for the caller's rollback, and the reference path decides.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.ledger.hold_repository import TRANSFER_COLUMNS, Refused, post_to_code
from paycore.payouts.settle_plan import as_read
from paycore.payouts.settle_repository import Accounts, write_state_event
from paycore.payouts.settlement_plan import WRITTEN_COLUMNS, Move

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
_TRANSFERS = {rows: driver.insert("ledger_transfers", TRANSFER_COLUMNS, rows) for rows in (1, 2)}
_ENTRIES = {rows: driver.insert("ledger_entries", _ENTRY_COLUMNS, rows) for rows in (2, 4)}
_ADJUSTMENT = driver.statement(
    f"INSERT INTO payout_adjustments ({', '.join(_ADJUSTMENT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in _ADJUSTMENT_COLUMNS)}) ON CONFLICT DO NOTHING RETURNING id"
)
_EVENT = driver.insert("events", EVENT_COLUMNS)


def write_move(connection: Connection, move: Move) -> Accounts | None:
    """Write a payout's settlement inside the caller's transaction: its accounts as left once
    written; None (nothing written) when the compare-and-set found the payout moved. Raises
    `Refused` having written what the caller's rollback undoes."""
    accepted, changes = move.accepted, move.changes
    expected = as_read(accepted)
    values = [changes[column] for column in WRITTEN_COLUMNS]
    found = driver.fetch(connection, _CAS, (*values, accepted.tenant_id, accepted.id, *expected))
    if not found:
        return None
    assert found[0] == (accepted.amount_minor, accepted.currency), "the payout moved is the payout planned"
    transfers = [[transfer[name] for name in TRANSFER_COLUMNS] for transfer in move.transfers]
    driver.execute(connection, _TRANSFERS[len(transfers)], [value for row in transfers for value in row])
    entries: list[Any] = []
    accounts = {}
    for entry in move.entries:  # in the reference path's order: each transfer's accounts, then the next's
        account = post_to_code(
            connection, accepted.tenant_id, entry.account_code, entry.direction, entry.amount_minor, accepted.currency
        )
        accounts[account.id] = account
        entries += [accepted.tenant_id, entry.id, entry.transfer_id, account.id, entry.direction]
        entries += [entry.amount_minor, account.currency, account.entries_count, move.payout.updated_at_us]
    driver.execute(connection, _ENTRIES[len(move.entries)], entries)
    write_state_event(connection, move.state_event)
    if move.adjustment is not None and move.adjustment_event is not None:
        if not driver.fetch(connection, _ADJUSTMENT, [move.adjustment[name] for name in _ADJUSTMENT_COLUMNS]):
            raise Refused(f"payout {accepted.id} has its bank's fee already")
        driver.execute(connection, _EVENT, [move.adjustment_event.get(name) for name in EVENT_COLUMNS])
    return list(accounts.values())
