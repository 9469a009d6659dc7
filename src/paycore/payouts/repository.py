"""SQL for payouts and their adjustments. The repository owns the row's shape
(`types.payout_row`); status and schedule changes go through the one lifecycle
(`paycore.lifecycle.store`). Every filter on the status matches its retired spellings too
(`states.spellings`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, or_, select

from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore, keys_in
from paycore.lifecycle import per_tenant, store
from paycore.payouts import states
from paycore.payouts.models import payout_adjustments, payouts
from paycore.payouts.types import Payout, payout_from_row

_GET = select(payouts).where(payouts.c.tenant_id == bindparam("t"), payouts.c.id == bindparam("i"))


def get(connection: Connection, tenant_id: str, payout_id: str, *, for_update: bool = False) -> Row[Any] | None:
    query = _GET.with_for_update() if for_update and connection.dialect.name == "postgresql" else _GET
    return connection.execute(query, {"t": tenant_id, "i": payout_id}).first()


# The same read from the event loop, with no worker thread (a data-plane phase's on PostgreSQL,
# `db/loop_calls.py`): the table's columns, as `_GET` (and `lifecycle.MACHINE.find`) read them.
_COLUMNS = tuple(column.name for column in payouts.c)
_GET_ON_LOOP = driver.statement(f"SELECT {', '.join(_COLUMNS)} FROM payouts WHERE tenant_id = ? AND id = ?")


async def find_on_loop(database: Database, tenant_id: str, payout_id: str) -> Payout | None:
    """The payout, as `lifecycle.MACHINE.find` reads it, from the event loop (PostgreSQL)."""
    rows = await loop_calls.fetch(database, _GET_ON_LOOP, (tenant_id, payout_id), commits=False)
    assert len(rows) <= 1, "one payout per (tenant, id)"
    return payout_from_row(dict(zip(_COLUMNS, rows[0], strict=True))) if rows else None


def exists(connection: Connection, tenant_id: str, payout_id: str) -> bool:
    return store.exists(connection, payouts, tenant_id, payout_id)


def page(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Row[Any]]:
    statuses = None if status is None else states.spellings((status,))
    return store.page(connection, payouts, tenant_id, statuses=statuses, starting_after=starting_after, limit=limit)


def due(connection: Connection, *, status: str, execute_on_max: str, now_us: int, limit: int) -> list[Payout]:
    """Payouts in `status` whose date has come, taken tenant by tenant (`per_tenant.claim`),
    locked (skipping locked ones) on PostgreSQL. One left on a fault (`lifecycle.faults`) waits
    for its next attempt, or for a person."""
    query = (
        select(payouts)
        .where(_status_literally(status), payouts.c.execute_on <= execute_on_max, _waited(now_us))
        .order_by(payouts.c.execute_on, payouts.c.id)
    )
    taken = per_tenant.claim(connection, payouts, query, rank=payouts.c.execute_on, limit=limit)
    return [payout_from_row(row._mapping) for row in per_tenant.flatten(taken)]


def _status_literally(status: str) -> Any:
    """`status = '<status>'` with the value written into the statement, not bound: the partial
    index of the scheduled ones (`ix_payouts_tenant_due`) is then provably usable by a generic
    plan too. The status is one of `states`' constants (one spelling: no legacy name)."""
    [spelling] = states.spellings((status,))
    return payouts.c.status == bindparam(None, spelling, literal_execute=True)


def _waited(now_us: int) -> Any:
    """Not left on a fault, or its next attempt has come."""
    return or_(payouts.c.faulted_at_us.is_(None), payouts.c.next_attempt_at_us <= now_us)


def oldest_execute_on(connection: Connection, *, status: str, execute_on_max: str, now_us: int) -> str | None:
    """The earliest day of the payouts in `status` whose day has come (those `due` takes)."""
    query = select(func.min(payouts.c.execute_on)).where(
        payouts.c.status.in_(states.spellings((status,))), payouts.c.execute_on <= execute_on_max, _waited(now_us)
    )
    day: str | None = connection.execute(query).scalar_one()
    return day


def count_by_status(connection: Connection) -> dict[str, int]:
    """Payouts by stored status, a legacy spelling counted under the status it means."""
    query = select(payouts.c.status, func.count()).group_by(payouts.c.status)
    counts: dict[str, int] = {}
    for status, found in connection.execute(query):
        current = states.normalize(status)
        counts[current] = counts.get(current, 0) + int(found)
    return counts


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


def bank_fees_of(connection: Connection, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str, str], int]:
    """The bank's fees booked on these payouts, by (tenant, payout, kind `fee`|`return_fee`)."""
    if not keys:
        return {}
    table = payout_adjustments.c
    query = (
        select(table.tenant_id, table.payout_id, table.kind, func.sum(table.amount_minor))
        .where(
            keys_in((table.tenant_id, table.payout_id), keys),
            table.kind.in_(("fee", "return_fee")),
            table.source == "bank",
        )
        .group_by(table.tenant_id, table.payout_id, table.kind)
    )
    return {(tenant, payout, kind): int(total) for tenant, payout, kind, total in connection.execute(query)}


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
