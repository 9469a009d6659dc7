"""A webhook that moves a payment, settles a refund or moves a payout, on the data plane (ADR
0026 step 3): read, plan, then one write. One shape for every such object; what differs is data,
an `ObjectApply` per object (`apply_payment.PAYMENT`, `apply_refund.REFUND`,
`apply_payout.PAYOUT`): its planning (`apply_object_plan.Planning`) and its SQL
(`apply_object_repository.Writing`).

`receive.py` comes here for an event the object's description takes (a charge's `succeeded` or
`failed` that did not find its payment there already, a refund's `succeeded` or `failed`, the
bank's `accepted` or `rejected`): an object still `processing` or `in_doubt` is moved. It is read
(no lock: the compare-and-set expects it as read), planned, and written by one prepared call of
its function on PostgreSQL (in autocommit: it commits a success only; the read runs on the same
connection before it) or, on SQLite, read and written in one transaction on the writer (BEGIN
IMMEDIATE: nothing moves in between) by the fixed list. A payment's function reads the payment
itself, under its lock: on PostgreSQL its call is planned from the event alone, with no read
before it (`apply_object_plan.plan_call`).

An object already where the event says (the usual case: the other system's synchronous answer
moved it first, the webhook confirms; or a redelivery) is the plain case, written in the same
way after the same read (`apply_object_plan.plan_confirm`: `stale` or `duplicate`, by the
object's confirm function or two statements), so that the read is never an extra cost.

Everything else answers None having written nothing, and the reference path (`service.receive`)
decides: no object, one in another status, a mismatch, an object moved between the read and the
call (the resolver won: PC013; a payment's function refuses with PC013 what the read would
refuse), a payment whose creating request has not answered yet (PC013), a refused move
(PC001-PC004, PC009), a deadlock, and a PostgreSQL schema without the function (42883).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.inbound import apply_object_plan, apply_object_repository
from paycore.inbound.apply_object_plan import Confirmation, M, Plan, Planning, T
from paycore.inbound.apply_object_repository import Accounts, Refused, Writing
from paycore.inbound.receive_repository import Unplain
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger

# What the call may answer with, having written nothing, for the reference path to decide (0A000:
# a statement of the function the database does not support, Citus's refusal of the events'
# numbering in it, ADR 0031).
_DECIDED_BY_REFERENCE: Final = frozenset(
    {"PC013", "PC001", "PC002", "PC003", "PC004", "PC009", "40P01", "40001", "42883", "0A000"}
)


@dataclass(frozen=True)
class ObjectApply(Generic[T, M]):
    """One object's apply phase: its planning and its SQL."""

    planning: Planning[T, M]
    writing: Writing[M]

    def takes(self, event: ProcessorEvent) -> bool:
        return self.planning.takes(event)

    def apply(self, database: Database, event: ProcessorEvent, body: bytes) -> str | None:
        """`applied`, `stale` or `duplicate` once written; None, having written nothing, for the
        reference path."""
        if not self.takes(event):
            return None
        if database.is_postgres:
            return self._call(database, event, body)
        try:
            result, accounts = database.transaction(lambda connection: self.write(connection, event, body))
        except (Unplain, Refused):
            return None
        ledger.remember_accounts(event.data.merchant_id, accounts)
        return result

    def write(self, connection: Connection, event: ProcessorEvent, body: bytes) -> tuple[str, Accounts]:
        """SQLite: read, plan and write in the caller's transaction on the writer; raises `Unplain`
        (or `Refused`) where the reference path decides, for the caller's rollback."""
        plan = self.plan_of(connection, event, body)
        if plan is None:
            raise Unplain(f"no plan for {event.id}")
        if isinstance(plan, Confirmation):
            return apply_object_repository.confirm_statements(connection, plan), []
        return apply_object_repository.write_statements(connection, self.writing, plan)

    def plan_of(self, connection: Connection, event: ProcessorEvent, body: bytes) -> Plan[M] | Confirmation[T] | None:
        """The object the event names, read on `connection`, and the plan of its move, or of the
        plain case where it is already where the event says."""
        planning = self.planning
        item = planning.machine.find(connection, event.data.merchant_id, event.data.request_id)
        if item is None:
            return None
        payload, now, context = body.decode(), clock_now_us(), EventContext.current()
        note_event_id = None if planning.confirmed_note is None else ids.new_id("evt")  # made first, as referenced
        confirmation = apply_object_plan.plan_confirm(
            planning,
            event,
            payload,
            item,
            now_us=now,
            audit_event_id=ids.new_id("evt"),
            context=context,
            note_event_id=note_event_id,
        )
        if confirmation is not None:
            return confirmation
        return apply_object_plan.plan_apply(
            planning,
            event,
            payload,
            item,
            now_us=now,
            new_ids=planning.new_ids(),
            audit_event_id=ids.new_id("evt"),
            context=context,
        )

    def call_plan_of(self, event: ProcessorEvent, body: bytes) -> Plan[Any] | None:
        """PostgreSQL, for an object whose function reads it itself: the plan from the event alone."""
        return apply_object_plan.plan_call(
            self.planning,
            event,
            body.decode(),
            now_us=clock_now_us(),
            new_ids=self.planning.new_ids(),
            audit_event_id=ids.new_id("evt"),
            context=EventContext.current(),
        )

    def _call(self, database: Database, event: ProcessorEvent, body: bytes) -> str | None:
        if self.planning.call_move is not None:  # no read before the call: the function's own
            unread = self.call_plan_of(event, body)
            if unread is None:
                return None
            with database.autocommit() as connection:
                return self._send(connection, unread)
        with database.autocommit() as connection:
            plan = self.plan_of(connection, event, body)
            return None if plan is None else self._send(connection, plan)

    def _send(self, connection: Connection, plan: Plan[Any] | Confirmation[T]) -> str | None:
        """The plan's one call; None, having written nothing, for the reference path."""
        try:
            if isinstance(plan, Confirmation):
                return apply_object_repository.confirm_call(connection, self.writing, plan)
            return apply_object_repository.apply_call(connection, self.writing, plan)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise
