"""The SQL of disputes: small named statements, no rules (disputes.py has those)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete, select, update

from paycore.db.sql import insert_or_ignore
from paycore_sandbox.dispute_models import dispute_actions, disputes, planned_disputes


def _one(connection: Connection, statement: Any) -> dict[str, Any] | None:
    row = connection.execute(statement).mappings().first()
    return None if row is None else dict(row)


def find(connection: Connection, dispute_id: str) -> dict[str, Any] | None:
    return _one(connection, select(disputes).where(disputes.c.dispute_id == dispute_id))


def of_charge(connection: Connection, charge_request_id: str) -> dict[str, Any] | None:
    return _one(connection, select(disputes).where(disputes.c.charge_request_id == charge_request_id))


def insert(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when inserted; False when the charge has a dispute already (committed)."""
    return insert_or_ignore(connection, disputes, values, ["charge_request_id"])


def change(connection: Connection, row: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Write `values` over the dispute as it was read (`row`): guarded on its sequence, which
    every change moves on by one, so of two changes racing the first wins and the other is
    told (False)."""
    assert values["sequence"] == row["sequence"] + 1
    statement = (
        update(disputes)
        .where(disputes.c.dispute_id == row["dispute_id"], disputes.c.sequence == row["sequence"])
        .values(**values)
    )
    return connection.execute(statement).rowcount == 1


def due(connection: Connection, now_us: int, limit: int) -> Sequence[dict[str, Any]]:
    """Open disputes whose next step (a decision, a deadline) is due, oldest first."""
    statement = (
        select(disputes)
        .where(disputes.c.next_step_at_us <= now_us)
        .order_by(disputes.c.next_step_at_us, disputes.c.dispute_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return [dict(row) for row in connection.execute(statement).mappings()]


def find_action(connection: Connection, request_id: str) -> dict[str, Any] | None:
    return _one(connection, select(dispute_actions).where(dispute_actions.c.request_id == request_id))


def insert_action(connection: Connection, values: Mapping[str, Any]) -> bool:
    return insert_or_ignore(connection, dispute_actions, values, ["request_id"])


def plan(connection: Connection, charge_request_id: str, succeeded_at_us: int) -> None:
    """A tok_disputed charge succeeded (or was captured) at `succeeded_at_us`: dispute it later, once."""
    values = {"charge_request_id": charge_request_id, "succeeded_at_us": succeeded_at_us}
    insert_or_ignore(connection, planned_disputes, values, ["charge_request_id"])


def planned_due(connection: Connection, succeeded_before_us: int, limit: int) -> Sequence[dict[str, Any]]:
    statement = (
        select(planned_disputes)
        .where(planned_disputes.c.succeeded_at_us <= succeeded_before_us)
        .order_by(planned_disputes.c.succeeded_at_us, planned_disputes.c.charge_request_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return [dict(row) for row in connection.execute(statement).mappings()]


def unplan(connection: Connection, charge_request_id: str) -> bool:
    statement = delete(planned_disputes).where(planned_disputes.c.charge_request_id == charge_request_id)
    return connection.execute(statement).rowcount == 1
