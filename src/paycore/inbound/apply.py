"""The processor's webhook that moves a payment, on the data plane (ADR 0026 step 3): plan,
then one write.

`receive.py` comes here when the plain case (a payment already in the status the event proves)
did not hold: a `charge.succeeded` or `charge.failed` event for a payment still `processing` or
`in_doubt` settles it. On PostgreSQL the event alone is planned (`apply_plan.plan_call`) and
written by one prepared call of `paycore_inbound_apply_payment` (the migration
`*_inbound_apply_payment.py`, in autocommit: it commits a success only), which reads the payment
itself under its row lock, checks it and makes the state event's snapshot from it: one round
trip. On SQLite the payment is read, planned (`apply_plan.plan_apply`) and written in one
transaction on the writer (BEGIN IMMEDIATE: nothing moves in between) by the fixed list of
`apply_repository.py`.

Everything else answers None having written nothing, and the reference path
(`service.receive`) decides: no payment, one in another status, manual or with an operation in
flight, a mismatch, a clock not past the payment's last change (on PostgreSQL the function's
PC013 for each), a creating request not yet answered (PC013), a refused move (PC001-PC004), a
deadlock, and a PostgreSQL schema without the function (42883).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db.engine import Database, is_lock_timeout
from paycore.idempotency import service as idempotency
from paycore.inbound import apply_plan, apply_repository, service
from paycore.inbound.apply_plan import Plan
from paycore.inbound.receive_repository import Unplain
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.payments import settle_repository
from paycore.payments.settle_plan import NewIds

# What the call may answer with, having written nothing, for the reference path to decide (0A000:
# a statement of the function the database does not support, Citus's refusal of the events'
# numbering in it, ADR 0031).
_DECIDED_BY_REFERENCE: Final = frozenset(
    {"PC013", "PC001", "PC002", "PC003", "PC004", "40P01", "40001", "42883", "0A000"}
)


def apply(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    """`applied` or `duplicate` once written; None, having written nothing, for the reference path."""
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
    return apply_repository.write_statements(connection, plan)


def plan_of(connection: Connection, event: ProcessorEvent, body: bytes) -> Plan | None:
    """The payment the event names, read on `connection`, and the plan of its move."""
    payment = payments.MACHINE.find(connection, event.data.merchant_id, event.data.request_id)
    if payment is None:
        return None
    return apply_plan.plan_apply(
        event,
        body.decode(),
        payment,
        service.charge_result(event.data),
        now_us=clock_now_us(),
        new_ids=_new_ids(),
        audit_event_id=ids.new_id("evt"),
        context=EventContext.current(),
    )


def _new_ids() -> NewIds:
    # In the reference path's order (the resolution, the clearing account's entry, the
    # destination's, the state event; the audit event's after them): ids made in one process increase.
    return NewIds(
        call_event_id="",  # a webhook has no call
        resolution_id=ids.new_id("txn"),
        debit_entry_id=ids.new_id("ent"),
        credit_entry_id=ids.new_id("ent"),
        state_event_id=ids.new_id("evt"),
    )


def _call(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    """PostgreSQL: planned from the event alone and written by one call, which reads the
    payment itself (no read before it)."""
    plan = apply_plan.plan_call(
        event,
        body.decode(),
        service.charge_result(event.data),
        now_us=clock_now_us(),
        new_ids=_new_ids(),
        audit_event_id=ids.new_id("evt"),
        context=EventContext.current(),
    )
    if plan is None:
        return None
    with database.autocommit() as connection:
        try:
            return apply_repository.apply_call(connection, plan)
        except DBAPIError as error:
            if is_lock_timeout(error):
                raise idempotency.waited_too_long(error) from error
            if getattr(error.orig, "sqlstate", None) in _DECIDED_BY_REFERENCE:
                return None
            raise
