"""All of the bank rail's SQL: small named statements, no rules. Those of accepting a payout
(`find_payout`, `join_open_batch`) run on the driver (paycore.db.driver); the others run once
per batch or per step, through SQLAlchemy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import BigInteger, Connection, RowMapping, case, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite

from paycore.db import driver
from paycore.db.sql import insert_or_ignore
from paycore_sandbox.models import bank_batches, bank_payouts
from paycore_sandbox.repository import first_row

# --- payouts -------------------------------------------------------------------------------


def insert_payout(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when inserted; False when a payout with this request id exists (committed)."""
    return insert_or_ignore(connection, bank_payouts, values, ["request_id"])


_PAYOUT_COLUMNS: Final = tuple(column.name for column in bank_payouts.columns)
_FIND_PAYOUT = driver.statement(f"SELECT {', '.join(_PAYOUT_COLUMNS)} FROM {bank_payouts.name} WHERE request_id = ?")


def find_payout(connection: Connection, request_id: str) -> Mapping[str, Any] | None:
    return first_row(bank_payouts, driver.fetch(connection, _FIND_PAYOUT, (request_id,)))


def payouts_of_batch(connection: Connection, batch_id: str, limit: int) -> Sequence[RowMapping]:
    statement = (
        select(bank_payouts)
        .where(bank_payouts.c.batch_id == batch_id)
        .order_by(bank_payouts.c.accepted_at_us, bank_payouts.c.bank_payout_id)
        .limit(limit)
    )
    return connection.execute(statement).mappings().all()


def schedule_batch(
    connection: Connection, batch_id: str, closed_at_us: int, reject_after_us: int, settle_after_us: int
) -> None:
    """Its batch closed: each payout's first step (its rejection or its settlement) is due."""
    # Typed as BIGINT: PostgreSQL would take a bare integer parameter for a 32-bit INTEGER.
    delay_us = case(
        (bank_payouts.c.planned_outcome == "rejected", literal(reject_after_us, BigInteger)),
        else_=literal(settle_after_us, BigInteger),
    )
    due_us = literal(closed_at_us, BigInteger) + delay_us + bank_payouts.c.settle_late_ms * 1_000
    statement = (
        update(bank_payouts)
        .where(bank_payouts.c.batch_id == batch_id, bank_payouts.c.status == "accepted")
        .values(next_step_at_us=due_us)
    )
    connection.execute(statement)


def due_steps(connection: Connection, now_us: int, limit: int) -> Sequence[RowMapping]:
    statement = (
        select(bank_payouts)
        .where(bank_payouts.c.next_step_at_us <= now_us)
        .order_by(bank_payouts.c.next_step_at_us, bank_payouts.c.request_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return connection.execute(statement).mappings().all()


def advance(connection: Connection, request_id: str, from_status: str, values: Mapping[str, Any]) -> bool:
    """Move a payout on from `from_status` (compare-and-set); False if another stepper did."""
    statement = (
        update(bank_payouts)
        .where(bank_payouts.c.request_id == request_id, bank_payouts.c.status == from_status)
        .values(**values)
    )
    return connection.execute(statement).rowcount == 1


# --- batches -------------------------------------------------------------------------------


def open_batch(connection: Connection, rail: str, currency: str) -> RowMapping | None:
    """The open batch of (rail, currency), locked on PostgreSQL until the transaction ends:
    whoever joins or closes it waits, so its count and total are never raced."""
    statement = select(bank_batches).where(
        bank_batches.c.rail == rail, bank_batches.c.currency == currency, bank_batches.c.closed_at_us.is_(None)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update()
    return connection.execute(statement).mappings().first()


def insert_batch(connection: Connection, values: Mapping[str, Any]) -> bool:
    """False when another open batch of the rail and currency exists (the partial unique index)."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(bank_batches).values(**values).on_conflict_do_nothing()
    return connection.execute(statement.returning(bank_batches.c.batch_id)).first() is not None


# The open batch of a rail and currency, joined if it has room: its count and total, checked
# and added to in one UPDATE, which locks its row on PostgreSQL until the transaction ends.
_JOIN_OPEN_BATCH = driver.statement(
    f'UPDATE {bank_batches.name} SET "count" = "count" + 1, total_minor = total_minor + ?'
    " WHERE rail = ? AND currency = ? AND closed_at_us IS NULL"
    ' AND closes_at_us > ? AND "count" < ? AND total_minor + ? <= ?'
    ' RETURNING batch_id, "count"'
)


def join_open_batch(
    connection: Connection, rail: str, currency: str, amount_minor: int, now_us: int, count_max: int, total_max: int
) -> tuple[str, int] | None:
    """Join the open batch of (rail, currency) if it is open at `now_us`, holds fewer than
    `count_max` payouts and keeps its total within `total_max` with this one: (its id, its
    count now). None, and nothing changed, if there is no such batch."""
    params = (amount_minor, rail, currency, now_us, count_max, amount_minor, total_max)
    rows = driver.fetch(connection, _JOIN_OPEN_BATCH, params)
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


def join_batch(connection: Connection, batch_id: str, amount_minor: int) -> None:
    statement = (
        update(bank_batches)
        .where(bank_batches.c.batch_id == batch_id, bank_batches.c.closed_at_us.is_(None))
        .values(count=bank_batches.c.count + 1, total_minor=bank_batches.c.total_minor + amount_minor)
    )
    assert connection.execute(statement).rowcount == 1, "the open batch is locked by the payout joining it"


def close_batch(connection: Connection, batch_id: str, closed_at_us: int) -> bool:
    """Close an open batch; False if it was closed already."""
    statement = (
        update(bank_batches)
        .where(bank_batches.c.batch_id == batch_id, bank_batches.c.closed_at_us.is_(None))
        .values(closed_at_us=closed_at_us)
    )
    return connection.execute(statement).rowcount == 1


def batches_to_close(connection: Connection, now_us: int, limit: int) -> Sequence[RowMapping]:
    statement = (
        select(bank_batches)
        .where(bank_batches.c.closed_at_us.is_(None), bank_batches.c.closes_at_us <= now_us)
        .order_by(bank_batches.c.closes_at_us, bank_batches.c.batch_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return connection.execute(statement).mappings().all()


def find_batch(connection: Connection, batch_id: str) -> RowMapping | None:
    statement = select(bank_batches).where(bank_batches.c.batch_id == batch_id)
    return connection.execute(statement).mappings().first()
