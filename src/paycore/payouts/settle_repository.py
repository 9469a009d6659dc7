"""The SQL of a payout's move out of `processing` or `in_doubt` on SQLite (ADR 0026 step 3): a
fixed list of statements sending a `settle_plan.Move` as it is. On PostgreSQL the same move is
`paycore_payouts_settle` (the migration `*_inbound_payouts.py`), called by the bank's
webhook's function.

The reference path's order, so its lock order too: the payout's compare-and-set (it must be as
read: its status, time, attempts, bank reference, batch and failure code, since the state
event's snapshot is made from that read), the hold's resolution (`ledger.hold_repository.resolve`:
the resolution, the source's totals, the in-transit account's, the posted entries), the state
event. A payout moved first leaves nothing written (None); whatever else would refuse raises
`Refused` for the caller's rollback, and the reference path decides.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS, state_event_args
from paycore.db import driver
from paycore.ledger import hold_repository
from paycore.payouts.settle_plan import WRITTEN_COLUMNS, Move, Step, Steps, as_read

Accounts = list[SimpleNamespace]
Refused = hold_repository.Refused  # the write would be refused: roll back, the reference path decides

# Each column written where the move writes it (`Move.changes`), kept where it does not.
_CAS = driver.statement(
    f"UPDATE payouts SET {', '.join(f'{column} = CASE WHEN ? THEN ? ELSE {column} END' for column in WRITTEN_COLUMNS)}"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND attempts = ? AND bank_reference IS ?"
    " AND batch_id IS ? AND failure_code IS ?"
    " RETURNING amount_minor, currency, transfer_id, source_account_id"
)
# Published: numbered after the payout's last published change in its own INSERT, as
# `audit/repository._INSERT_NEXT` numbers it; the trigger of migration 0015 queues it.
_COLUMNS = [name for name in EVENT_COLUMNS if name != "object_sequence"]
_STATE_EVENT = driver.statement(
    f"INSERT INTO events ({', '.join(_COLUMNS)}, object_sequence) VALUES ({', '.join('?' for _ in _COLUMNS)},"
    " (SELECT coalesce(max(object_sequence), 0) + 1 FROM events WHERE tenant_id = ? AND object_id = ?))"
)


def write_move(connection: Connection, move: Move) -> Accounts | None:
    """Write a payout's move inside the caller's transaction: the hold's two accounts once
    written; None (nothing written) when the compare-and-set found the payout moved. Raises
    `Refused` having written what the caller's rollback undoes."""
    accepted, changes = move.accepted, move.changes
    values: list[object] = []
    for column in WRITTEN_COLUMNS:
        values += [column in changes, changes.get(column)]
    expected = as_read(accepted)
    found = driver.fetch(connection, _CAS, (*values, accepted.tenant_id, accepted.id, *expected))
    if not found:
        return None
    assert found[0] == (
        accepted.amount_minor,
        accepted.currency,
        accepted.transfer_id,
        accepted.source_account_id,
    ), "the payout moved is the payout planned"
    accounts = hold_repository.resolve(connection, move.resolution)
    write_state_event(connection, move.state_event)
    return accounts


def write_state_event(connection: Connection, row: dict[str, object]) -> None:
    """A payout's state event, numbered after its last published change (a settle's and a
    settlement's)."""
    assert "object_sequence" not in row and row["kind"] == "state_change", row
    driver.execute(
        connection, _STATE_EVENT, (*(row.get(name) for name in _COLUMNS), row["tenant_id"], row["object_id"])
    )


# ------------------------------------------------------------------ PostgreSQL: the one call
# `paycore_payouts_settle` (migration `*_inbound_payouts.py`) on the caller's connection, in its
# transaction (a worker round's: `in_doubt.plane`): the same move as the list above.
SETTLE = driver.binary_arrays(
    driver.statement(f"SELECT paycore_payouts_settle({', '.join(['?'] * 16)}, ?::text[], {', '.join(['?'] * 6)})")
)


def move_params(move: Move) -> tuple[Any, ...]:
    """The move's arguments as `paycore_payouts_settle` and `paycore_inbound_apply_payout` both
    take them: the payout as read and as moved, the hold's resolution and its entries."""
    accepted, moved, resolution = move.accepted, move.payout, move.resolution
    return (
        accepted.id,
        *as_read(accepted),
        moved.updated_at_us,
        moved.status,
        moved.failure_code,
        moved.bank_reference,
        moved.batch_id,
        accepted.amount_minor,
        accepted.transfer_id,
        resolution.resolution_id,
        list(resolution.entry_ids or ()),
    )


def settle_call(connection: Connection, move: Move) -> bool:
    """Write a payout's move in one call inside the caller's transaction: True once written;
    False (nothing written) when the compare-and-set found the payout moved. A refused move
    raises DBAPIError (PC001-PC004, PC009), for the caller's rollback."""
    params = (move.accepted.tenant_id, *move_params(move), *state_event_args(move.state_event))
    [(written,)] = driver.fetch(connection, SETTLE, params)
    return bool(written)


F = TypeVar("F", bound=Step)
S = TypeVar("S", bound=Step)


def write_steps(
    connection: Connection,
    steps: Steps[F, S],
    write_first: Callable[[Connection, F], Accounts | None],
    write_second: Callable[[Connection, S], Accounts | None],
) -> Accounts | None:
    """Write a composed move's two steps in turn, inside the caller's transaction: the accounts
    both left, once written; None (nothing written) when the first's compare-and-set found the
    payout moved (the second's then finds it as the first left it, under the writer's lock)."""
    first = write_first(connection, steps.first)
    if first is None:
        return None
    second = write_second(connection, steps.second)
    assert second is not None, "the payout as its first step left it, under the writer's lock"
    return list({account.id: account for account in (*first, *second)}.values())
