"""SQL for payouts and their adjustments. Status changes are compare-and-set on the stored
status; claims take FOR UPDATE SKIP LOCKED on PostgreSQL (SQLite has one writer). Every
filter on the status matches its retired spellings too (`states.spellings`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, or_, select, update

from paycore.db.sql import insert_or_ignore
from paycore.payouts import states
from paycore.payouts.models import payout_adjustments, payouts

_INSERT = insert(payouts)
_GET = select(payouts).where(payouts.c.tenant_id == bindparam("t"), payouts.c.id == bindparam("i"))


def add(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT, values)


def get(connection: Connection, tenant_id: str, payout_id: str, *, for_update: bool = False) -> Row[Any] | None:
    query = _GET.with_for_update() if for_update and connection.dialect.name == "postgresql" else _GET
    return connection.execute(query, {"t": tenant_id, "i": payout_id}).first()


def change_status(
    connection: Connection, tenant_id: str, payout_id: str, from_states: Collection[str], values: dict[str, Any]
) -> bool:
    """Compare-and-set: True only if the payout was still in one of `from_states` (in any
    spelling: a row not yet backfilled by migration 0006 still moves, exactly once)."""
    statement = (
        update(payouts)
        .where(
            payouts.c.tenant_id == tenant_id,
            payouts.c.id == payout_id,
            payouts.c.status.in_(states.spellings(from_states)),
        )
        .values(**values)
    )
    return connection.execute(statement).rowcount == 1


def set_values(connection: Connection, tenant_id: str, payout_id: str, values: dict[str, Any]) -> None:
    statement = update(payouts).where(payouts.c.tenant_id == tenant_id, payouts.c.id == payout_id)
    connection.execute(statement.values(**values))


def page(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    query = select(payouts).where(payouts.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(payouts.c.status.in_(states.spellings((status,))))
    if starting_after is not None:
        query = query.where(payouts.c.id > starting_after)
    return list(connection.execute(query.order_by(payouts.c.id).limit(limit)))


def due_keys(connection: Connection, *, status: str, execute_on_max: str, limit: int) -> list[Row[Any]]:
    """Scheduled payouts whose date has come, locked (skipping locked ones) on PostgreSQL."""
    query = (
        select(payouts.c.tenant_id, payouts.c.id, payouts.c.status, payouts.c.updated_at_us)
        .where(payouts.c.status.in_(states.spellings((status,))), payouts.c.execute_on <= execute_on_max)
        .order_by(payouts.c.execute_on, payouts.c.id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return list(connection.execute(query))


def claimable_keys(connection: Connection, *, statuses: Collection[str], now_us: int, limit: int) -> list[Row[Any]]:
    """Payouts in `statuses` whose next attempt is due and whose claim (if any) has lapsed."""
    query = (
        select(payouts.c.tenant_id, payouts.c.id)
        .where(
            payouts.c.status.in_(states.spellings(statuses)),
            payouts.c.next_attempt_at_us <= now_us,
            or_(payouts.c.claimed_until_us.is_(None), payouts.c.claimed_until_us < now_us),
        )
        .order_by(payouts.c.next_attempt_at_us, payouts.c.id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return list(connection.execute(query))


def count_by_status(connection: Connection) -> dict[str, int]:
    """Payouts by stored status, a legacy spelling counted under the status it means."""
    query = select(payouts.c.status, func.count()).group_by(payouts.c.status)
    counts: dict[str, int] = {}
    for status, found in connection.execute(query):
        current = states.normalize(status)
        counts[current] = counts.get(current, 0) + int(found)
    return counts


def working_since_us(connection: Connection) -> int | None:
    """When the oldest item in `processing` (a call to the processor or bank in flight, by a
    worker or a request) last changed status, over every tenant; None when there is none."""
    query = select(func.min(payouts.c.updated_at_us)).where(payouts.c.status == states.PROCESSING)
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


def in_doubt_summary(connection: Connection) -> tuple[int, int | None]:
    query = select(func.count(), func.min(payouts.c.in_doubt_since_us)).where(payouts.c.status == states.IN_DOUBT)
    found, oldest = connection.execute(query).one()
    return int(found), oldest


# --- adjustments ---------------------------------------------------------------------------


def add_adjustment(connection: Connection, values: dict[str, Any]) -> bool:
    """Insert unless the payout already has an adjustment with this dedupe key."""
    return insert_or_ignore(connection, payout_adjustments, values, ("tenant_id", "payout_id", "dedupe_key"))


def adjustment_by_key(connection: Connection, tenant_id: str, payout_id: str, dedupe_key: str) -> Row[Any] | None:
    query = select(payout_adjustments).where(
        payout_adjustments.c.tenant_id == tenant_id,
        payout_adjustments.c.payout_id == payout_id,
        payout_adjustments.c.dedupe_key == dedupe_key,
    )
    return connection.execute(query).first()


def adjustments_of(connection: Connection, tenant_id: str, payout_id: str) -> list[Row[Any]]:
    query = (
        select(payout_adjustments)
        .where(payout_adjustments.c.tenant_id == tenant_id, payout_adjustments.c.payout_id == payout_id)
        .order_by(payout_adjustments.c.created_at_us, payout_adjustments.c.id)
    )
    return list(connection.execute(query))


def adjustment_totals(connection: Connection, tenant_id: str, payout_id: str) -> dict[str, int]:
    query = (
        select(payout_adjustments.c.kind, func.coalesce(func.sum(payout_adjustments.c.amount_minor), 0))
        .where(payout_adjustments.c.tenant_id == tenant_id, payout_adjustments.c.payout_id == payout_id)
        .group_by(payout_adjustments.c.kind)
    )
    return {kind: int(total) for kind, total in connection.execute(query)}
