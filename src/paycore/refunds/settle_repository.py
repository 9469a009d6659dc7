"""The SQL of a refund's move out of `processing` or `in_doubt` on SQLite (ADR 0026 step 3): a
fixed list of statements sending a `settle_plan.Move` as it is. On PostgreSQL the same move is
`paycore_refunds_settle` (the migration `*_inbound_refunds.py`), called by the processor's
webhook's function.

The reference path's order, so its lock order too: the refund's compare-and-set (it must be as
read, column for column: the snapshot the state event carries is made from that read), the
ceiling's release on the payment's row (a failure), the hold's resolution made from the hold
itself, the two accounts' totals (`ledger.hold_repository`'s statements and checks, shared with a
payment's settle), the posted entries, the state event. A refund moved first leaves nothing
written (None); whatever else would refuse raises `Refused` for the caller's rollback, and the
reference path decides.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS, state_event_args
from paycore.db import driver
from paycore.ledger import hold_repository
from paycore.refunds.settle_plan import WRITTEN_COLUMNS, Move

Accounts = list[SimpleNamespace]


Refused = hold_repository.Refused  # the write would be refused: roll back, the reference path decides


# The compare-and-set: the refund as read (its status, time, reference and failure code, the
# columns its snapshot shows that a move may change), and the account its payment credited (the
# hold's debited account, found by the refund's payment).
_CAS = driver.statement(
    f"UPDATE refunds SET {', '.join(f'{column} = ?' for column in WRITTEN_COLUMNS)}"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND processor_reference IS ?"
    " AND failure_code IS ?"
    " RETURNING payment_id, amount_minor, currency, transfer_id, (SELECT payments.destination_account_id"
    " FROM payments WHERE payments.tenant_id = refunds.tenant_id AND payments.id = refunds.payment_id)"
)
# `ceiling.release`'s statement: a failed refund gives its amount back to its payment.
_RELEASE = driver.statement(
    "UPDATE payments SET refunded_minor = refunded_minor - ? WHERE tenant_id = ? AND id = ? AND refunded_minor >= ?"
)
# Published: numbered after the refund's last published change in its own INSERT, as
# `audit/repository._INSERT_NEXT` numbers it; the trigger of migration 0015 queues it.
_STATE_EVENT = driver.statement(
    f"INSERT INTO events ({', '.join(name for name in EVENT_COLUMNS if name != 'object_sequence')}, object_sequence)"
    f" VALUES ({', '.join('?' for name in EVENT_COLUMNS if name != 'object_sequence')},"
    " (SELECT coalesce(max(object_sequence), 0) + 1 FROM events WHERE tenant_id = ? AND object_id = ?))"
)


def write_move(connection: Connection, move: Move) -> Accounts | None:
    """Write a refund's move inside the caller's transaction: the hold's two accounts once
    written; None (nothing written) when the compare-and-set found the refund moved. Raises
    `Refused` having written what the caller's rollback undoes."""
    accepted, moved = move.accepted, move.refund
    expected = (accepted.status, accepted.updated_at_us, accepted.processor_reference, accepted.failure_code)
    found = driver.fetch(
        connection,
        _CAS,
        (*(getattr(moved, column) for column in WRITTEN_COLUMNS), accepted.tenant_id, accepted.id, *expected),
    )
    if not found:
        return None
    payment_id, amount_minor, currency, transfer_id, destination_id = found[0]
    assert (payment_id, amount_minor, currency, transfer_id) == (
        accepted.payment_id,
        accepted.amount_minor,
        accepted.currency,
        accepted.transfer_id,
    ), "the refund moved is the refund planned"
    if move.released_minor:
        release = (move.released_minor, accepted.tenant_id, accepted.payment_id, move.released_minor)
        if driver.execute(connection, _RELEASE, release) != 1:
            raise Refused(f"payment {accepted.payment_id} does not hold refund {accepted.id}'s amount")
    accounts = _resolve_hold(connection, move, destination_id)
    _write_state_event(connection, move.state_event)
    return accounts


def _resolve_hold(connection: Connection, move: Move, destination_id: str | None) -> Accounts:
    """The hold posted or voided (`hold_repository.resolve`: its resolution, the destination's
    totals, the clearing account's, the posted entries), in the reference path's order."""
    accepted = move.accepted
    if destination_id is None or accepted.transfer_id is None:
        raise Refused(f"refund {accepted.id} has no hold on its payment's account")
    resolution = hold_repository.Resolution(
        tenant_id=accepted.tenant_id,
        transfer_id=accepted.transfer_id,
        owner_id=accepted.id,
        amount_minor=accepted.amount_minor,
        currency=accepted.currency,
        post=move.post,
        resolution_id=move.resolution_id,
        entry_ids=(move.entries[0].id, move.entries[1].id) if move.entries else None,
        debited_id=destination_id,
        credited_code=move.clearing_code,
        now_us=move.refund.updated_at_us,
    )
    assert resolution.deltas() == (move.destination_delta, move.clearing_delta), "the plan's deltas are the hold's"
    return hold_repository.resolve(connection, resolution)


def _write_state_event(connection: Connection, row: dict[str, Any]) -> None:
    assert "object_sequence" not in row and row["kind"] == "state_change", row
    values = [row.get(name) for name in EVENT_COLUMNS if name != "object_sequence"]
    driver.execute(connection, _STATE_EVENT, (*values, row["tenant_id"], row["object_id"]))


# ------------------------------------------------------------------ PostgreSQL: the one call
# `paycore_refunds_settle` (migration `*_inbound_refunds.py`) on the caller's connection, in its
# transaction (a worker round's: `in_doubt.plane`): the same move as the list above.
SETTLE = driver.binary_arrays(
    driver.statement(f"SELECT paycore_refunds_settle({', '.join(['?'] * 16)}, ?::text[], {', '.join(['?'] * 6)})")
)


def move_params(move: Move) -> tuple[Any, ...]:
    """The move's arguments as `paycore_refunds_settle` and `paycore_inbound_apply_refund` both
    take them: the refund as read and as moved, the hold's post or release and its entries."""
    accepted, moved = move.accepted, move.refund
    return (
        accepted.id,
        accepted.status,
        accepted.updated_at_us,
        accepted.processor_reference,
        accepted.failure_code,
        moved.updated_at_us,
        moved.status,
        moved.failure_code,
        moved.processor_reference,
        accepted.amount_minor,
        accepted.payment_id,
        accepted.transfer_id,
        move.post,
        move.released_minor,
        move.resolution_id,
        [entry.id for entry in move.entries],
    )


def settle_call(connection: Connection, move: Move) -> bool:
    """Write a refund's move in one call inside the caller's transaction: True once written;
    False (nothing written) when the compare-and-set found the refund moved. A refused move
    raises DBAPIError (PC001-PC004, PC009), for the caller's rollback."""
    params = (move.accepted.tenant_id, *move_params(move), *state_event_args(move.state_event))
    [(written,)] = driver.fetch(connection, SETTLE, params)
    return bool(written)
