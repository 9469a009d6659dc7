"""Every SQL statement of disputes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, Select, delete, func, select, tuple_, update

from paycore.db.sql import insert_or_ignore
from paycore.disputes.models import AWAITING_RESPONSE, dispute_answers_in_flight, disputes
from paycore.lifecycle import lease

# The nearest evidence deadline of the disputes awaiting an answer (`/metrics`): the statuses a
# literal, so that both planners prove the partial index `ix_disputes_evidence_due` (migration
# 0037) serves it, reading its first entry.
_EVIDENCE_DUE_FIRST = f"SELECT MIN(evidence_due_by_us) FROM disputes WHERE {AWAITING_RESPONSE}"


def insert_once(connection: Connection, values: dict[str, Any]) -> bool:
    """The dispute's row unless the processor's dispute id is recorded already (then False:
    the first evidence made it; the caller moves that row)."""
    return insert_or_ignore(connection, disputes, values, ("tenant_id", "processor_dispute_id"))


def by_processor_id(
    connection: Connection, tenant_id: str, processor_dispute_id: str, *, for_update: bool
) -> Row[Any] | None:
    query = select(disputes).where(
        disputes.c.tenant_id == tenant_id, disputes.c.processor_dispute_id == processor_dispute_id
    )
    return connection.execute(query.with_for_update() if for_update else query).first()


def get(connection: Connection, tenant_id: str, dispute_id: str, *, for_update: bool = False) -> Row[Any] | None:
    query = select(disputes).where(disputes.c.tenant_id == tenant_id, disputes.c.id == dispute_id)
    return connection.execute(query.with_for_update() if for_update else query).first()


def get_any(connection: Connection, dispute_id: str, tenant_id: str | None) -> Row[Any] | None:
    """The dispute by id, in one tenant or across every tenant (the console's)."""
    query = select(disputes).where(disputes.c.id == dispute_id)
    if tenant_id is not None:
        query = query.where(disputes.c.tenant_id == tenant_id)
    return connection.execute(query.limit(1)).first()


def matching(connection: Connection, column: str, value: str, tenant_id: str | None, limit: int) -> list[Row[Any]]:
    """Up to `limit` disputes whose `column` (id, processor_dispute_id) is `value`: an index
    lookup (the key leads with the processor's id; `ix_disputes_id`, migration 0041)."""
    assert column in ("id", "processor_dispute_id"), column
    query = select(disputes).where(disputes.c[column] == value)
    if tenant_id is not None:
        query = query.where(disputes.c.tenant_id == tenant_id)
    return list(connection.execute(query.limit(limit)))


def by_due(
    connection: Connection,
    tenant_id: str | None,
    statuses: tuple[str, ...],
    *,
    after: tuple[int, str, str] | None,
    limit: int,
) -> list[Row[Any]]:
    """Disputes in `statuses` (one tenant's or every tenant's), the nearest evidence deadline
    first; `after` is the (evidence_due_by_us, tenant_id, id) of the previous page's last row."""
    order = (disputes.c.evidence_due_by_us, disputes.c.tenant_id, disputes.c.id)
    query = select(disputes).where(disputes.c.status.in_(statuses))
    if tenant_id is not None:
        query = query.where(disputes.c.tenant_id == tenant_id)
    if after is not None:
        query = query.where(tuple_(*order) > tuple_(*after))
    return list(connection.execute(query.order_by(*order).limit(limit)))


def set_values(connection: Connection, tenant_id: str, dispute_id: str, values: dict[str, Any]) -> None:
    statement = update(disputes).where(disputes.c.tenant_id == tenant_id, disputes.c.id == dispute_id)
    connection.execute(statement.values(**values))


def page(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    payment_id: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Row[Any]]:
    """The tenant's disputes, newest first (ids are time-ordered)."""
    query = select(disputes).where(disputes.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(disputes.c.status == status)
    if payment_id is not None:
        query = query.where(disputes.c.payment_id == payment_id)
    if starting_after is not None:
        query = query.where(disputes.c.id < starting_after)
    return list(connection.execute(query.order_by(disputes.c.id.desc()).limit(limit)))


def count_by_status(connection: Connection) -> dict[str, int]:
    """Disputes by status over every tenant (`/metrics`): reads `ix_disputes_status` whole, as
    the payouts' gauge reads its table; disputes are few beside the payments."""
    query = select(disputes.c.status, func.count()).group_by(disputes.c.status)
    return {str(status): int(count) for status, count in connection.execute(query)}


def evidence_due_first(connection: Connection) -> int | None:
    """The nearest `evidence_due_by_us` of the disputes awaiting an answer, over every tenant
    (None: none awaits one), through the partial index, never the history."""
    found = connection.exec_driver_sql(_EVIDENCE_DUE_FIRST).scalar_one()
    return None if found is None else int(found)


# --- answers whose reply was lost (`in_flight`) ------------------------------------------

_IN_FLIGHT = dispute_answers_in_flight


def keep_in_flight(connection: Connection, values: dict[str, Any]) -> bool:
    """The dispute kept for the worker to ask about, unless it is kept already (then False)."""
    return insert_or_ignore(connection, _IN_FLIGHT, values, ("tenant_id", "id"))


def clear_in_flight(connection: Connection, tenant_id: str, dispute_id: str) -> int:
    statement = delete(_IN_FLIGHT).where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id)
    return int(connection.execute(statement).rowcount)


def in_flight(connection: Connection, tenant_id: str, dispute_id: str) -> Row[Any] | None:
    query = select(_IN_FLIGHT).where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id)
    return connection.execute(query).first()


def due_in_flight(now_us: int) -> Select[Any]:
    """The kept answers due to be asked about, whose lease is free, oldest due first (for
    `lease.claim`, which bounds it)."""
    return (
        select(_IN_FLIGHT.c.tenant_id, _IN_FLIGHT.c.id)
        .where(_IN_FLIGHT.c.next_attempt_at_us <= now_us, lease.free(_IN_FLIGHT, now_us))
        .order_by(_IN_FLIGHT.c.next_attempt_at_us, _IN_FLIGHT.c.id)
    )


def schedule_in_flight(
    connection: Connection, tenant_id: str, dispute_id: str, holder: str, next_attempt_at_us: int | None
) -> bool:
    """The next round of a kept answer that `holder` still holds (its lease given up); False
    when it was cleared meanwhile or another worker took it (its lease lapsed)."""
    statement = (
        update(_IN_FLIGHT)
        .where(_IN_FLIGHT.c.tenant_id == tenant_id, _IN_FLIGHT.c.id == dispute_id, _IN_FLIGHT.c.claimed_by == holder)
        .values(next_attempt_at_us=next_attempt_at_us, claimed_by=None, claimed_until_us=None)
    )
    return int(connection.execute(statement).rowcount) == 1


def oldest_in_flight_due_us(connection: Connection, now_us: int) -> int | None:
    query = select(func.min(_IN_FLIGHT.c.next_attempt_at_us)).where(_IN_FLIGHT.c.next_attempt_at_us <= now_us)
    found: int | None = connection.execute(query).scalar_one_or_none()
    return found
