"""The processor's webhook that settles a refund, on the data plane (ADR 0026 step 3): read,
plan, then one write.

`receive.py` comes here for a refund event saying `succeeded` or `failed`: a refund still
`processing` or `in_doubt` is moved. The refund is read (no lock: the compare-and-set expects it
as read), planned (`apply_refund_plan.py`), and written by one prepared call of
`paycore_inbound_apply_refund` on PostgreSQL (the migration `*_inbound_refunds.py`, in
autocommit: it commits a success only; the read runs on the same connection before it) or, on
SQLite, read and written in one transaction on the writer (BEGIN IMMEDIATE: nothing moves in
between) by the fixed list of `apply_refund_repository.py`.

A refund already in the status the event proves (the usual case: the processor's answer settled
it first, the webhook confirms; or a redelivery) is the plain case, written in the same way
after the same read (`apply_refund_plan.plan_confirm`: `stale` or `duplicate`, by
`paycore_inbound_confirm_refund` or two statements), so that the read is never an extra cost.

Everything else answers None having written nothing, and the reference path (`service.receive`)
decides: no refund, one in another status (a contradiction: `conflict`), without a hold, a
mismatch, a refund moved between the read and the call (the resolver won: PC013), a refused
move (PC001-PC004, PC009), a deadlock, and a PostgreSQL schema without the function (42883).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db.engine import Database, is_lock_timeout
from paycore.idempotency import service as idempotency
from paycore.inbound import apply_refund_plan, apply_refund_repository
from paycore.inbound.apply_refund_plan import Confirmation, Plan
from paycore.inbound.receive_repository import Unplain
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger
from paycore.refunds import service as refunds
from paycore.refunds import settle_repository
from paycore.refunds.settle_plan import NewIds

# What the call may answer with, having written nothing, for the reference path to decide.
_DECIDED_BY_REFERENCE: Final = frozenset(
    {"PC013", "PC001", "PC002", "PC003", "PC004", "PC009", "40P01", "40001", "42883"}
)


def apply(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    """`applied` or `duplicate` once written; None, having written nothing, for the reference path."""
    if not apply_refund_plan.is_final(event):
        return None
    if database.is_postgres:
        return _call(database, event, body)
    try:
        result, accounts = database.transaction(lambda connection: write(connection, event, body))
    except (Unplain, settle_repository.Refused):
        return None
    ledger.remember_accounts(event.data.merchant_id, accounts)
    return result


def write(connection: Connection, event: ProcessorEvent, body: bytes) -> tuple[str, settle_repository.Accounts]:
    """SQLite: read, plan and write in the caller's transaction on the writer; raises `Unplain`
    (or `Refused`) where the reference path decides, for the caller's rollback."""
    plan = plan_of(connection, event, body)
    if plan is None:
        raise Unplain(f"no plan for {event.id}")
    if isinstance(plan, Confirmation):
        return apply_refund_repository.confirm_statements(connection, plan), []
    return apply_refund_repository.write_statements(connection, plan)


def plan_of(connection: Connection, event: ProcessorEvent, body: bytes) -> Plan | Confirmation | None:
    """The refund the event names, read on `connection`, and the plan of its move, or of the
    plain case where it is already in the status the event proves."""
    refund = refunds.MACHINE.find(connection, event.data.merchant_id, event.data.request_id)
    if refund is None:
        return None
    payload, now, context = body.decode(), clock_now_us(), EventContext.current()
    confirmation = apply_refund_plan.plan_confirm(
        event, payload, refund, now_us=now, audit_event_id=ids.new_id("evt"), context=context
    )
    if confirmation is not None:
        return confirmation
    return apply_refund_plan.plan_apply_refund(
        event,
        payload,
        refund,
        now_us=now,
        new_ids=_new_ids(),
        audit_event_id=ids.new_id("evt"),
        context=context,
    )


def _new_ids() -> NewIds:
    # In the reference path's order (the resolution, the destination's entry, the clearing
    # account's, the state event; the audit event's after them): ids made in one process increase.
    return NewIds(
        resolution_id=ids.new_id("txn"),
        debit_entry_id=ids.new_id("ent"),
        credit_entry_id=ids.new_id("ent"),
        state_event_id=ids.new_id("evt"),
    )


def _call(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    with database.autocommit() as connection:
        plan = plan_of(connection, event, body)
        if plan is None:
            return None
        try:
            if isinstance(plan, Confirmation):
                return apply_refund_repository.confirm_call(connection, plan)
            return apply_refund_repository.apply_call(connection, plan)
        except DBAPIError as error:
            if is_lock_timeout(error):
                raise idempotency.waited_too_long(error) from error
            if getattr(error.orig, "sqlstate", None) in _DECIDED_BY_REFERENCE:
                return None
            raise
