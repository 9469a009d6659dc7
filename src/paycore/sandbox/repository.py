"""All of the sandbox's SQL: small named statements, no rules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, and_, literal, select, union_all, update

from paycore.db.sql import insert_or_ignore
from paycore.sandbox.models import charges, refunds, webhook_attempts, webhooks

# --- charges -------------------------------------------------------------------------------


def insert_charge(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when inserted; False when a charge with this request id exists (committed)."""
    return insert_or_ignore(connection, charges, values, ["request_id"])


def find_charge(connection: Connection, request_id: str) -> RowMapping | None:
    return connection.execute(select(charges).where(charges.c.request_id == request_id)).mappings().first()


def find_charge_by_processor_id(connection: Connection, processor_charge_id: str) -> RowMapping | None:
    statement = select(charges).where(charges.c.processor_charge_id == processor_charge_id)
    return connection.execute(statement).mappings().first()


def reserve_refund(connection: Connection, charge_request_id: str, amount_minor: int, now_us: int) -> bool:
    """Add to the charge's refunded amount unless it would pass the charge's amount. One
    guarded UPDATE: concurrent refunds of one charge queue on its row and each sees the
    total the previous one committed."""
    statement = (
        update(charges)
        .where(
            charges.c.request_id == charge_request_id,
            charges.c.refunded_minor + amount_minor <= charges.c.amount_minor,
        )
        .values(refunded_minor=charges.c.refunded_minor + amount_minor, updated_at_us=now_us)
    )
    return connection.execute(statement).rowcount == 1


def release_refund(connection: Connection, charge_request_id: str, amount_minor: int, now_us: int) -> None:
    statement = (
        update(charges)
        .where(charges.c.request_id == charge_request_id, charges.c.refunded_minor >= amount_minor)
        .values(refunded_minor=charges.c.refunded_minor - amount_minor, updated_at_us=now_us)
    )
    assert connection.execute(statement).rowcount == 1, "a refund releases what it reserved"


# --- refunds -------------------------------------------------------------------------------


def insert_refund(connection: Connection, values: Mapping[str, Any]) -> bool:
    return insert_or_ignore(connection, refunds, values, ["request_id"])


def find_refund(connection: Connection, request_id: str) -> RowMapping | None:
    return connection.execute(select(refunds).where(refunds.c.request_id == request_id)).mappings().first()


# --- pending charges and refunds reaching their final status --------------------------------


def due_to_settle(connection: Connection, object_type: str, now_us: int, limit: int) -> Sequence[RowMapping]:
    table = charges if object_type == "charge" else refunds
    statement = (
        select(table)
        .where(table.c.status == "pending", table.c.settle_at_us <= now_us)
        .order_by(table.c.settle_at_us, table.c.request_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return connection.execute(statement).mappings().all()


def finish(connection: Connection, object_type: str, request_id: str, now_us: int) -> bool:
    """Move a pending row to its final status; False if another settler did it first."""
    table = charges if object_type == "charge" else refunds
    statement = (
        update(table)
        .where(table.c.request_id == request_id, table.c.status == "pending")
        .values(
            status=table.c.final_status,
            failure_code=table.c.final_failure_code,
            settle_at_us=None,
            updated_at_us=now_us,
        )
    )
    return connection.execute(statement).rowcount == 1


# --- the webhook outbox ---------------------------------------------------------------------


def insert_webhook(connection: Connection, values: Mapping[str, Any]) -> None:
    connection.execute(webhooks.insert().values(**values))


def release_held(connection: Connection, object_type: str, object_request_id: str, due_at_us: int) -> int:
    statement = (
        update(webhooks)
        .where(
            webhooks.c.object_type == object_type,
            webhooks.c.object_request_id == object_request_id,
            webhooks.c.held.is_(True),
        )
        .values(held=False, due_at_us=due_at_us)
    )
    return int(connection.execute(statement).rowcount)


def claim_due(connection: Connection, now_us: int, leased_until_us: int, limit: int) -> Sequence[RowMapping]:
    """The deliveries due now, oldest first, pushed to `leased_until_us` so that another
    deliverer does not send them while this one does (if this one dies, they come due again)."""
    statement = (
        select(webhooks)
        .where(webhooks.c.state == "pending", webhooks.c.held.is_(False), webhooks.c.due_at_us <= now_us)
        .order_by(webhooks.c.due_at_us, webhooks.c.delivery_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    rows = connection.execute(statement).mappings().all()
    if rows:
        ids = [row["delivery_id"] for row in rows]
        connection.execute(update(webhooks).where(webhooks.c.delivery_id.in_(ids)).values(due_at_us=leased_until_us))
    return rows


def record_attempt(connection: Connection, values: Mapping[str, Any]) -> None:
    connection.execute(webhook_attempts.insert().values(**values))


def update_delivery(connection: Connection, delivery_id: str, values: Mapping[str, Any]) -> None:
    statement = update(webhooks).where(webhooks.c.delivery_id == delivery_id, webhooks.c.state == "pending")
    connection.execute(statement.values(**values))


def deliveries(connection: Connection, limit: int) -> Sequence[RowMapping]:
    """The outbox, oldest first (for inspection and tests)."""
    statement = select(webhooks).order_by(webhooks.c.created_at_us, webhooks.c.delivery_id).limit(limit)
    return connection.execute(statement).mappings().all()


def attempts_of(connection: Connection, delivery_id: str) -> Sequence[RowMapping]:
    statement = (
        select(webhook_attempts)
        .where(webhook_attempts.c.delivery_id == delivery_id)
        .order_by(webhook_attempts.c.attempt)
    )
    return connection.execute(statement).mappings().all()


# --- the settlement report ------------------------------------------------------------------


def settlement_rows(connection: Connection, start_us: int, end_us: int, rows_per_fetch: int) -> Iterator[RowMapping]:
    """Charges and refunds created in [start_us, end_us), in creation order, fetched in pages."""
    charge_rows = select(
        literal("charge").label("type"),
        charges.c.request_id,
        charges.c.processor_charge_id.label("processor_id"),
        charges.c.merchant_id,
        charges.c.amount_minor,
        charges.c.currency,
        charges.c.status,
        charges.c.created_at_us,
    ).where(and_(charges.c.created_at_us >= start_us, charges.c.created_at_us < end_us))
    refund_rows = select(
        literal("refund").label("type"),
        refunds.c.request_id,
        refunds.c.processor_refund_id.label("processor_id"),
        refunds.c.merchant_id,
        refunds.c.amount_minor,
        refunds.c.currency,
        refunds.c.status,
        refunds.c.created_at_us,
    ).where(and_(refunds.c.created_at_us >= start_us, refunds.c.created_at_us < end_us))
    combined = union_all(charge_rows, refund_rows).subquery()
    statement = select(combined).order_by(combined.c.created_at_us, combined.c.type, combined.c.request_id)
    result = connection.execution_options(yield_per=rows_per_fetch).execute(statement)
    yield from result.mappings()
