"""A capture's and a cancel's two phases on the data plane (ADR 0026 step 3, ADR 0029): plan,
then one write each, with the processor called between them outside any transaction (ADR 0006).

*begin*: the authorization read (one read, no lock: the compare-and-set expects it exactly as
read), planned (`capture_plan.plan_begin`), written by one call of
`paycore_payments_capture_begin` or `paycore_payments_cancel_begin` on PostgreSQL
(autocommit), or, on SQLite, read and written in one transaction (BEGIN IMMEDIATE, the read
and 3 statements): the key claimed open and the payment `processing` with the operation in
flight. *finish*: planned (`capture_plan.plan_finish`), written by one call of
`paycore_payments_capture_finish` / `paycore_payments_cancel_finish` or the settle phase's list
(`settle_repository`): the payment `succeeded` (the hold posted for what was captured and the
rest released) or `canceled` (the hold voided), the events, the request's answer.

Everything else stays the reference path's (`operations.py`, SQLAlchemy Core), and each phase
answers None having written nothing for it to decide: a key that exists (its replay, its wait,
`idempotency_key_reused`), a payment missing or not `requires_capture`, an amount past what is
capturable (the refusals it records), a payment that moved since it was read (a racing
capture, cancel or webhook: the loser's 409 is the reference path's), any answer but
`captured` for the amount asked or `canceled` (a refusal, no answer: in doubt; an expiry), a
refused write, and a PostgreSQL schema without the functions (SQLSTATE 42883).

`begin` and `finish` are sync, on the caller's worker thread (the FastAPI route's, or the thin
edge's with a transport that blocks: `operations.py`). The thin edge with a transport that calls
from the loop writes them from the event loop (`begin_on_loop`, `finish_on_loop`, ADR 0026
decision 4; `operations_on_loop.py`): on SQLite the same transaction handed to the writer
(`Database.transaction_async`), on PostgreSQL the same read and calls on connections of the
loop's own (`db/loop_calls.py`), their errors read by the same rule (`idempotency.left_to_reference`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.calls import Call
from paycore.payments import capture_plan, capture_repository, lifecycle, settle_repository
from paycore.payments.settle_types import NewIds, Plan
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

# What a call may answer with, having written nothing, for the reference path to decide: a lost
# compare-and-set or a key answered already (PC004), the ledger's refusals (PC001-PC003), a
# deadlock, a serialization failure, a schema without the function, a statement of it the
# database does not support (0A000: Citus, ADR 0031). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC004", "40P01", "40001", "42883", "0A000"})
R = TypeVar("R")


def begin(
    database: Database,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    *,
    actor: str,
    stale_ms: int,
) -> Payment | None:
    """The payment `processing` with the operation (`capture` | `cancel`) in flight once
    written; None, having written nothing, where the reference path must decide."""
    begins = _Begins(scope, payment_id, operation, amount_minor, actor, stale_ms)
    if not database.is_postgres:
        # SQLite: the read in the write's own transaction (one writer: nothing moves in between).
        try:
            return database.transaction(begins.on_sqlite)
        except capture_repository.Lost:
            return None
    with database.read() as connection:
        plan = begins.plan(_loaded(connection, scope.tenant_id, payment_id))
    if plan is None:
        return None
    return plan.payment if _on_postgres(database, lambda c: capture_repository.begin_call(c, plan)) else None


async def begin_on_loop(
    database: Database,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    *,
    actor: str,
    stale_ms: int,
) -> Payment | None:
    """`begin` from the event loop, no worker thread (ADR 0026 decision 4): on SQLite the same
    transaction handed to the writer (`Database.transaction_async`, the statements on the loop),
    on PostgreSQL the same read and call awaited on a connection of the loop (`db/loop_calls.py`),
    their errors read alike."""
    begins = _Begins(scope, payment_id, operation, amount_minor, actor, stale_ms)
    if not database.is_postgres:
        try:
            return await database.transaction_async(begins.on_sqlite)
        except capture_repository.Lost:
            return None
    found = await loop_calls.fetch(
        database, capture_repository.LOAD_PAYMENT, (scope.tenant_id, payment_id), commits=False
    )
    plan = begins.plan(capture_repository.payment_of(found))
    if plan is None:
        return None
    try:
        rows = await loop_calls.fetch(database, *capture_repository.begin_statement(plan), commits=True)
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return None
        raise
    return plan.payment if capture_repository.begun(rows) else None


class _Begins:
    """One request's begin: its plan from the authorization as read, and SQLite's transaction."""

    def __init__(
        self, scope: KeyScope, payment_id: str, operation: str, amount_minor: int | None, actor: str, stale_ms: int
    ) -> None:
        self.scope, self.payment_id, self.operation, self.amount_minor = scope, payment_id, operation, amount_minor
        self.actor, self.stale_ms = actor, stale_ms
        self.context = EventContext.current()  # this request's: the write may run on another thread

    def plan(self, authorized: Payment | None) -> capture_plan.BeginPlan | None:
        if authorized is None:
            return None  # not found: the reference path's 404
        return capture_plan.plan_begin(
            self.scope,
            authorized,
            self.operation,
            self.amount_minor,
            processing_stale_ms=self.stale_ms,
            actor=self.actor,
            event_id=ids.new_id("evt"),
            context=self.context,
        )

    def on_sqlite(self, connection: Connection) -> Payment | None:
        plan = self.plan(_loaded(connection, self.scope.tenant_id, self.payment_id))
        if plan is None or not capture_repository.begin_statements(connection, plan):
            return None
        return plan.payment


def _loaded(connection: Connection, tenant_id: str, payment_id: str) -> Payment | None:
    return lifecycle.MACHINE.find(connection, tenant_id, payment_id)


def finish(database: Database, started: Payment, call: Call[ChargeResult], *, actor: str) -> Outcome | None:
    """The capture request's answer once this phase wrote it; None, having written nothing,
    where the reference path must decide. Raises DatabaseUnavailable as a transaction does."""
    plan = _plan_finish(started, call, actor)
    if plan is None:
        return None
    if database.is_postgres:
        accounts = _on_postgres(database, lambda connection: capture_repository.finish_call(connection, plan))
    else:
        accounts = _finish_sqlite(database, plan)
    return _written(started, plan, accounts)


async def finish_on_loop(
    database: Database, started: Payment, call: Call[ChargeResult], *, actor: str
) -> Outcome | None:
    """`finish` from the event loop, no worker thread: the same plan, written on PostgreSQL by
    the same call on a connection of the loop (`db/loop_calls.py`: a connection lost during it
    is `CommitOutcomeUnknown`), on SQLite by the same list handed to the writer."""
    plan = _plan_finish(started, call, actor)
    if plan is None:
        return None
    if not database.is_postgres:
        try:
            accounts = await database.transaction_async(
                lambda connection: settle_repository.write_statements(connection, plan)
            )
        except settle_repository.Refused:
            return None
        return _written(started, plan, accounts)
    try:
        rows = await loop_calls.fetch(database, *capture_repository.finish_statement(plan), commits=True)
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return None
        raise
    return _written(started, plan, capture_repository.finished(rows))


def _plan_finish(started: Payment, call: Call[ChargeResult], actor: str) -> Plan | None:
    return capture_plan.plan_finish(
        started, call, actor=actor, now_us=clock_now_us(), new_ids=_new_ids(), context=EventContext.current()
    )


def _written(started: Payment, plan: Plan, accounts: settle_repository.Accounts | None) -> Outcome | None:
    if not accounts:
        return None
    ledger.remember_accounts(started.tenant_id, accounts)
    return plan.answer


def _new_ids() -> NewIds:
    # In the reference path's order, as `settle._new_ids`.
    return NewIds(
        call_event_id=ids.new_id("evt"),
        resolution_id=ids.new_id("txn"),
        debit_entry_id=ids.new_id("ent"),
        credit_entry_id=ids.new_id("ent"),
        state_event_id=ids.new_id("evt"),
    )


def _on_postgres(database: Database, call: Callable[[Connection], R]) -> R | None:
    """The call's answer once committed; None (False), having written nothing, for the reference path."""
    with database.autocommit() as connection:
        try:
            return call(connection)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


def _finish_sqlite(database: Database, plan: Plan) -> settle_repository.Accounts | None:
    try:
        return database.transaction(lambda connection: settle_repository.write_statements(connection, plan))
    except settle_repository.Refused:
        return None
