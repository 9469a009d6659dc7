"""A payout's cancel (`POST /v1/payouts/{payout_id}/cancel`) on the data plane (ADR 0026 step
3): read, plan, then one write.

The planner (`cancel_plan.py`) needs the payout whole (its snapshot and the answer are the
payout's JSON) and its history (the answer's): one read of each is what this phase reads (the
reference path reads both too). On PostgreSQL they run in autocommit on the call's connection,
then the one prepared call of `paycore_payouts_cancel` (migration `*_payouts_cancel.py`: it
commits a success only); on SQLite, the reads and the fixed list of `cancel_repository.py` run
in one transaction on the writer (ADR 0008's group commit). Either moves the payout only if it
is still what was read: the compare-and-set the reference path makes, on the same row, so a
cancel and a worker's claim still have exactly one winner.

The reference path (`service.cancel` inside `idempotency.run`, through SQLAlchemy Core) stays
the home of everything that is not a success written at once: a key that exists (its replay,
or `idempotency_key_reused`), a payout missing, canceled already (answered unchanged) or that
the transition table does not let be canceled (the 409 with its current status), a payout that
moved between the read and the write (a worker's claim won), and a schema below the
function's revision (SQLSTATE 42883). The fast write has then written nothing; the key makes
the fallback safe: a fast write that committed is found by the reference path's claim and
replayed, never written twice. A lock wait past its bound is answered at once, as the
reference path answers it (`idempotency.waited_too_long`).

`cancel` is sync, on the caller's thread (the FastAPI route's worker thread). The thin edge
cancels from the event loop with no worker thread (`cancel_on_loop`, ADR 0026 decision 4): on
PostgreSQL the same two reads as driver statements (`repository.find_on_loop`,
`audit.events_of_on_loop`: the same rows) and then the same call, each awaited on a connection
of the loop's own (`db/loop_calls.py`; a connection lost during the call is
`CommitOutcomeUnknown`, as on the thread, during a read `DatabaseUnavailable`: nothing was
written), the call's errors read by the same rule (`idempotency.left_to_reference`); on SQLite the same
work (the reads and the list) handed to the writer's group commit (`Database.transaction_async`,
the statements on the loop). The same statements either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit import service as audit
from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import ids
from paycore.payouts import cancel_repository, lifecycle, repository
from paycore.payouts.cancel_plan import HISTORY_LENGTH_MAX, Encode, NewIds, Plan, plan_cancel, target
from paycore.payouts.cancel_repository import Moved
from paycore.payouts.types import Payout

R = TypeVar("R")

# What the call may answer with, having written nothing, for the reference path to decide: the
# payout moved since it was read (PC012), a deadlock, a serialization failure, and a schema
# older than the function (no such function: this code runs from OLDEST_COMPATIBLE_REVISION
# on), and a statement of the function the database does not support (0A000: Citus refuses the
# events' numbering in it, ADR 0031). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC012", "40P01", "40001", "42883", "0A000"})


def cancel(
    database: Database,
    scope: KeyScope,
    payout_id: str,
    *,
    actor: str,
    encode: Encode,
    reference: Callable[[], R],
) -> Outcome | R:
    """The payout canceled (stored `canceled`, its hold voided, its state event, its key with
    the answer): the answer (200); or, when the data plane wrote nothing, what `reference` (the
    reference path) answers."""
    write = _call if database.is_postgres else _write_sqlite
    plan = write(database, scope, payout_id, actor, encode)
    return plan.answer if plan is not None else reference()


async def cancel_on_loop(
    database: Database, scope: KeyScope, payout_id: str, *, actor: str, encode: Encode
) -> Outcome | None:
    """`cancel` from the event loop, no worker thread: the answer (200) once the payout is
    canceled, or None, having written nothing, when the reference path must decide (the caller
    runs it)."""
    if database.is_postgres:
        plan = await _call_on_loop(database, scope, payout_id, actor, encode)
    else:
        try:
            plan = await database.transaction_async(_sqlite_work(scope, payout_id, actor, encode))
        except Moved:
            plan = None
    return plan.answer if plan is not None else None


def _read_plan(connection: Connection, scope: KeyScope, payout_id: str, actor: str, encode: Encode) -> Plan | None:
    """The plan, from the payout and its events as read on `connection`; None for a cancel the
    reference path answers (a payout missing, canceled already, or the table's 409)."""
    before = lifecycle.MACHINE.find(connection, scope.tenant_id, payout_id)
    if not _cancelable(before):
        return None
    history = audit.events_of(connection, scope.tenant_id, payout_id, limit=HISTORY_LENGTH_MAX)
    return _plan(scope, before, history, actor, encode)


def _cancelable(before: Payout | None) -> TypeGuard[Payout]:
    """Whether the data plane may plan a cancel of `before` (not missing, not canceled, the
    transition table's move): else the reference path answers."""
    return before is not None and target(before.status) is not None


def _plan(scope: KeyScope, before: Payout, history: list[audit.Event], actor: str, encode: Encode) -> Plan | None:
    return plan_cancel(
        scope,
        before,
        history,
        actor=actor,
        context=EventContext.current(),  # this request's: the write may run on another thread
        new_ids=NewIds(void_transfer_id=ids.new_id("txn"), event_id=ids.new_id("evt")),
        encode=encode,
    )


def _call(database: Database, scope: KeyScope, payout_id: str, actor: str, encode: Encode) -> Plan | None:
    """PostgreSQL: the two reads and the call on one connection in autocommit (no transaction
    around the reads: the call's compare-and-set checks the payout is still what they read)."""
    with database.autocommit() as connection:
        plan = _read_plan(connection, scope, payout_id, actor, encode)
        return plan if plan is not None and call(connection, plan) else None


async def _call_on_loop(database: Database, scope: KeyScope, payout_id: str, actor: str, encode: Encode) -> Plan | None:
    """`_call` from the event loop: the same two reads (driver statements, the same rows), then
    the same call, each on a connection of the loop's; the call's errors read alike."""
    before = await repository.find_on_loop(database, scope.tenant_id, payout_id)
    if not _cancelable(before):
        return None
    history = await audit.events_of_on_loop(database, scope.tenant_id, payout_id, limit=HISTORY_LENGTH_MAX)
    plan = _plan(scope, before, history, actor, encode)
    if plan is None:
        return None
    params = cancel_repository.call_params(plan)
    try:
        rows = await loop_calls.fetch(database, cancel_repository.CALL, params, commits=True)
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return None
        raise
    return plan if cancel_repository.canceled(rows) else None


def call(connection: Connection, plan: Plan) -> bool:
    """True once the call committed the cancel; False, having written nothing, when the
    reference path must decide."""
    try:
        return cancel_repository.cancel_call(connection, plan)
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return False
        raise


def _write_sqlite(database: Database, scope: KeyScope, payout_id: str, actor: str, encode: Encode) -> Plan | None:
    """SQLite: the two reads, then the list, in one transaction on the writer (its one writer:
    nothing moves the payout between the read and the write)."""
    try:
        return database.transaction(_sqlite_work(scope, payout_id, actor, encode))
    except Moved:
        return None


def _sqlite_work(scope: KeyScope, payout_id: str, actor: str, encode: Encode) -> Callable[[Connection], Plan | None]:
    """The reads and the list, for one transaction on the writer (a thread's or the loop's)."""

    def work(connection: Connection) -> Plan | None:
        plan = _read_plan(connection, scope, payout_id, actor, encode)
        return plan if plan is not None and cancel_repository.write_statements(connection, plan) else None

    return work
