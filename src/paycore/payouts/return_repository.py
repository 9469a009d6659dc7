"""The SQL of a payout's return on SQLite (ADR 0026 step 3): a fixed list of statements sending a
`return_plan.Move` as it is. On PostgreSQL the same move is migration
`*_inbound_payout_return.py`'s `paycore_inbound_return_payout`.

The reference path's order: the payout's compare-and-set (as read: its status, time, attempts,
bank reference, batch and failure code, since the state event's snapshot is made from that read),
the state event, then the return's postings and the return fee's (`settlement_repository.post`:
the transfers, each entry's account by its code or the source by its id, the entries) and their
adjustments with their audit events (`settlement_repository.adjust`). A payout moved first leaves
nothing written (None); whatever else would refuse raises `Refused` for the caller's rollback,
and the reference path decides. A payout not settled yet (`return_plan.ReturnSteps`) is settled
first by the settlement's list (`settlement_repository.write_move`), then returned by this one.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.db import driver
from paycore.payouts import settlement_repository
from paycore.payouts.return_plan import WRITTEN_COLUMNS, Move, ReturnSteps
from paycore.payouts.settle_plan import as_read
from paycore.payouts.settle_repository import Accounts, write_state_event, write_steps
from paycore.payouts.settlement_repository import adjust, post

_CAS = driver.statement(
    f"UPDATE payouts SET {', '.join(f'{column} = ?' for column in WRITTEN_COLUMNS)}"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND attempts = ? AND bank_reference IS ?"
    " AND batch_id IS ? AND failure_code IS ? RETURNING amount_minor, currency, source_account_id, settled_at_us"
)


def write_move(connection: Connection, move: Move | ReturnSteps) -> Accounts | None:
    """Write a payout's return inside the caller's transaction: its accounts as left once written;
    None (nothing written) when the compare-and-set found the payout moved. Raises `Refused`
    having written what the caller's rollback undoes."""
    if isinstance(move, ReturnSteps):
        return write_steps(connection, move, settlement_repository.write_move, write_move)
    accepted, changes = move.accepted, move.changes
    values = [changes[column] for column in WRITTEN_COLUMNS]
    found = driver.fetch(connection, _CAS, (*values, accepted.tenant_id, accepted.id, *as_read(accepted)))
    if not found:
        return None
    assert found[0] == (
        accepted.amount_minor,
        accepted.currency,
        accepted.source_account_id,
        accepted.settled_at_us,
    ), "the payout moved is the payout planned, settled when the window was read"
    write_state_event(connection, move.state_event)
    accounts = post(connection, accepted, move.transfers, move.entries)
    adjust(connection, accepted, move.adjustments, move.adjustment_events)
    return accounts
