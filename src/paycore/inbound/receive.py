"""The processor's webhook on the data plane (ADR 0026 step 3): verify, plan, then one write.

The signature and the event's shape are checked first, by the reference path's own check
(`events.verified_event`: a bad one is refused and nothing is stored). A plain charge event
(`receive_plan.py`: `charge.succeeded` or `charge.failed` for a payment already in that
status, the usual case, the processor's synchronous answer having settled it) is then written
by one prepared call of `paycore_inbound_receive` on PostgreSQL (the migration
`*_inbound_receive.py`, in autocommit: it commits a success only) or by the fixed list of
`receive_repository.py` on SQLite, in one transaction on the writer (ADR 0008's group commit):
`stale`, or `duplicate` for an event stored before. Where its payment is not in that status,
the same event may settle it: a payment still `processing` or `in_doubt` is moved by the apply
phase. A refund event saying `succeeded` or `failed` settles a refund still `processing` or
`in_doubt` the same way, and a payout event saying `accepted` or `rejected` moves a payout still
`processing` or `in_doubt` to `sent` or `failed`: one shape for all three (`apply_object.py`: a
read, then one call or a fixed list; a payment's call reads the payment itself), its data per
object in `apply_payment.py` (`paycore_inbound_apply_payment`), `apply_refund.py`
(`paycore_inbound_apply_refund`) and `apply_payout.py` (`paycore_inbound_apply_payout`); the
bank's `settled` settles a payout `sent` the same way (`apply_payout_settlement.py`:
`paycore_inbound_settle_payout`), or one still waiting in two steps
(`paycore_inbound_settle_waiting_payout`), and its `returned` returns a settled payout inside its
window (`apply_payout_return.py`: `paycore_inbound_return_payout`), or one not settled yet after
settling it (`paycore_inbound_return_sent_payout`, `paycore_inbound_return_waiting_payout`). The
plain cases after the same read: a payout the bank's `accepted` finds sent, or its `rejected`
finds failed (`paycore_inbound_confirm_payout`), and a return past its window, refused with a
note (`paycore_inbound_refuse_payout_return`).

Everything else goes to the reference path (`service.receive`, unchanged), which verifies again
and decides as it always has: every other type or object, and a charge event whose payment is
missing, in another status (a conflict), of another amount or currency (a mismatch), one that
overtook its own request's answer, a lost race (a deadlock, a serialization failure, a payment
moved between the apply phase's read and its write) and a PostgreSQL schema without the
functions (SQLSTATE 42883).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.inbound import (
    apply_payment,
    apply_payout,
    apply_payout_return,
    apply_payout_settlement,
    apply_refund,
    events,
    receive_plan,
    receive_repository,
    service,
)
from paycore.inbound.apply_object import ObjectApply
from paycore.inbound.receive_plan import Plan
from paycore.inbound.schemas import ProcessorEvent
from paycore.inbound.service import Received
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import hold_repository
from paycore.ledger import service as ledger

# What the call may answer with, having written nothing, for the reference path to decide: the
# payment not in the planned status (PC013), a deadlock, a serialization failure, and a schema
# without the function (this code runs from OLDEST_COMPATIBLE_REVISION on). Any other error is
# raised.
_DECIDED_BY_REFERENCE: Final = frozenset({"PC013", "40P01", "40001", "42883"})
# The objects a webhook moves on the data plane, each by the one shape (a charge's event only once
# the plain case did not hold).
_MOVING: Final = (
    apply_payment.PAYMENT,
    apply_refund.REFUND,
    apply_payout.PAYOUT,
    apply_payout_settlement.SETTLEMENT,
    apply_payout_return.RETURN,
)


def receive(database: Database, secret: str, signature: str | None, body: bytes) -> Received:
    """What the processor's webhook made, as `service.receive` answers it. Raises
    `InvalidSignature` and `InvalidWebhook` (nothing stored) as it does."""
    event = events.verified_event(secret, signature, body)
    if receive_plan.plain_status(event) is not None:
        result = _call(database, event, body) if database.is_postgres else _write_sqlite(database, event, body)
        if result is not None:
            return Received(event.id, result)  # else not in the status it proves: it may move
    return _applied_or_reference(database, event, secret, signature, body)


def _moving(event: ProcessorEvent) -> ObjectApply[Any, Any] | None:
    """The apply phase of the object the event may move, if any."""
    for moving in _MOVING:
        if moving.takes(event):
            return moving
    return None


async def receive_async(
    database: Database,
    secret: str,
    signature: str | None,
    body: bytes,
    *,
    in_thread: Callable[..., Awaitable[Received]],
) -> Received:
    """`receive` for a caller on an event loop, which must not block: the plain case with no
    thread hop (on SQLite the list joins the group commit from the loop,
    `Database.transaction_async`; on PostgreSQL its one call on a connection of the loop,
    `db/loop_calls.py`), and on SQLite the apply phase too; `in_thread(function, *arguments)`
    (the HTTP layer's worker thread) runs the rest: the reference path, and on PostgreSQL the
    apply phase (its read and call, `apply_object.ObjectApply.apply`)."""
    if database.is_postgres:
        return await _receive_postgres(database, secret, signature, body, in_thread)
    event = events.verified_event(secret, signature, body)
    if receive_plan.plain_status(event) is not None:

        def work(connection: Connection) -> str:
            return receive_repository.write_statements(connection, plan(event, body))

        try:
            return Received(event.id, await database.transaction_async(work))
        except receive_repository.Unplain:
            pass
    moving = _moving(event)
    if moving is not None:
        write = moving.write
        try:
            result, accounts = await database.transaction_async(lambda connection: write(connection, event, body))
        except (receive_repository.Unplain, hold_repository.Refused):
            pass
        else:
            ledger.remember_accounts(event.data.merchant_id, accounts)
            return Received(event.id, result)
    return await in_thread(service.receive, database, secret, signature, body)


async def _receive_postgres(
    database: Database,
    secret: str,
    signature: str | None,
    body: bytes,
    in_thread: Callable[..., Awaitable[Received]],
) -> Received:
    """`receive_async` on PostgreSQL: the plain case's call from the loop; where it wrote
    nothing, the apply phase, else the reference path, on one worker thread."""
    event = events.verified_event(secret, signature, body)
    if receive_plan.plain_status(event) is not None:
        planned = plan(event, body)
        try:
            rows = await loop_calls.fetch(
                database, receive_repository.CALL, receive_repository.call_params(planned), commits=True
            )
        except DBAPIError as error:
            if not idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                raise
        else:
            return Received(event.id, receive_repository.received(planned, rows))
    return await in_thread(_applied_or_reference, database, event, secret, signature, body)


def _applied_or_reference(
    database: Database, event: ProcessorEvent, secret: str, signature: str | None, body: bytes
) -> Received:
    """`receive` past its plain case (which wrote nothing): the apply phase of the object the
    event may move, else the reference path. Blocking."""
    moving = _moving(event)  # a charge's or a refund's final word, the bank's: an object waiting on it moves
    result = None if moving is None else moving.apply(database, event, body)
    if result is not None:
        return Received(event.id, result)
    return service.receive(database, secret, signature, body)


def plan(event: ProcessorEvent, body: bytes) -> Plan:
    """The plan of a plain event (`receive_plan.plain_status`), made now."""
    planned = receive_plan.plan_receive(
        event, body.decode(), now_us=clock_now_us(), audit_event_id=ids.new_id("evt"), context=EventContext.current()
    )
    assert planned is not None, "a plain event has a plan"
    return planned


def _call(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    """`stale` or `duplicate` once the call committed (or found the event stored); None, having
    written nothing, when the reference path must decide."""
    planned = plan(event, body)
    with database.autocommit() as connection:
        try:
            return receive_repository.receive_call(connection, planned)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


def _write_sqlite(database: Database, event: ProcessorEvent, body: bytes) -> str | None:
    """`stale` or `duplicate` once the list committed; None, having written nothing, when the
    reference path must decide. Planned inside the transaction, as the reference path reads its
    clock there: the wait for the write lock comes before it."""

    def work(connection: Connection) -> str:
        return receive_repository.write_statements(connection, plan(event, body))

    try:
        return database.transaction(work)
    except receive_repository.Unplain:
        return None
