"""A payment's first phase, *accept*, on the data plane (ADR 0026 step 3): plan, then one write.

The planner (`accept_plan.py`) makes every row accept writes and the `Payment` it returns (an
automatic payment's or an authorization's: ADR 0029, the same rows but the capture method); the
write is one prepared call of `paycore_payments_accept` on PostgreSQL (migrations 0027, 0036, in
autocommit: it commits a success only) or the fixed list of `accept_repository.py` on SQLite,
in one transaction on the writer (ADR 0008's group commit). Then, with no transaction open, the
processor is called and the settle phase runs (`service.create_payment`).

The reference path (`service._start`, in one transaction through SQLAlchemy Core) stays the
home of everything that is not a success written at once, as ADR 0011 left it for transfers
and `credits/create.py` for credits: a key that exists (its replay, the wait for a first
request still without an answer, or `idempotency_key_reused`), a destination that is missing
or holds another currency (its recorded refusal), a limit, a schema below 0027 (no function:
SQLSTATE 42883), a deadlock. The fast write has then written nothing; the key makes the
fallback safe: a fast write that committed is found by the reference path's claim, never
written twice. A lock wait past its bound is answered at once, as the reference path answers
it (`idempotency.waited_too_long`), without waiting a second time.

`accept` is sync, on the caller's thread (the FastAPI route's worker thread, or a transport
that blocks: `service.create_payment`). The payments' thin edge accepts from the event loop
(`accept_on_loop`, ADR 0026 decision 4): on SQLite the list handed to the writer's group
commit, on PostgreSQL the same call on a connection of the loop's own (`db/loop_calls.py`),
its errors read by the same rule (`idempotency.left_to_reference`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.payments import accept_repository
from paycore.payments.accept_plan import NewIds, Plan, clearing_template, plan_accept
from paycore.payments.accept_repository import Refused
from paycore.payments.types import NewPayment, Payment

R = TypeVar("R")

# What the call may answer with, having written nothing, for the reference path to decide: its
# refusals (migration 0027: a total's range, insufficient funds, the balance limit, a
# destination missing or in another currency), a deadlock, a serialization failure, and a
# schema older than 0036 (no function of this signature, the one with the capture method:
# this code runs from OLDEST_COMPATIBLE_REVISION on). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC010", "40P01", "40001", "42883"})
# The prefixes of `NewIds`' fields, in their order: the payment, its hold, the clearing account
# (written only where missing), the hold's two entries, the payment's birth event.
_NEW_IDS = ("pay", "txn", "acct", "ent", "ent", "evt")


def accept(
    database: Database,
    scope: KeyScope,
    new: NewPayment,
    *,
    processing_stale_ms: int,
    reference: Callable[[], R],
) -> Payment | R:
    """The payment accepted (stored `processing`, its hold, its event, its key claimed open),
    or, when the data plane wrote nothing, what `reference` (the reference path) answers."""
    plan = _plan(database, scope, new, processing_stale_ms)
    if plan is not None and (_call(database, plan) if database.is_postgres else _write_sqlite(database, plan)):
        return plan.payment
    return reference()


async def accept_on_loop(
    database: Database, scope: KeyScope, new: NewPayment, *, processing_stale_ms: int
) -> Payment | None:
    """From the event loop (`create_on_loop`), no worker thread: the payment accepted, or None,
    having written nothing, when the reference path must decide. On PostgreSQL the one call
    awaited on a connection of the loop (`db/loop_calls.py`); on SQLite the list handed to the
    writer (`Database.transaction_async`, the statements on the loop)."""
    plan = _plan(database, scope, new, processing_stale_ms)
    if plan is None:
        return None
    if database.is_postgres:
        return plan.payment if await _call_on_loop(database, plan) else None
    try:
        clearing_id = await database.transaction_async(
            lambda connection: accept_repository.write_statements(connection, plan)
        )
    except Refused as refused:
        _refused(database, plan, refused)
        return None
    return plan.payment if _written(database, plan, clearing_id) else None


def _plan(database: Database, scope: KeyScope, new: NewPayment, processing_stale_ms: int) -> Plan | None:
    # PostgreSQL's call ensures the clearing account itself, whatever this process has seen.
    code = clearing_template(new.currency).code
    cached = None if database.is_postgres else ledger.system_account_ids(database).get(scope.tenant_id, code)
    return plan_accept(
        scope,
        new,
        processing_stale_ms=processing_stale_ms,
        clearing_account_id=cached,
        context=EventContext.current(),  # this request's: the write may run on another thread
        new_ids=NewIds(*ids.new_ids_of(_NEW_IDS)),
    )


def _call(database: Database, plan: Plan) -> bool:
    """True once the call committed the accept; False, having written nothing, when the
    reference path must decide."""
    with database.autocommit() as connection:
        try:
            return accept_repository.accept_call(connection, plan)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return False
            raise


async def _call_on_loop(database: Database, plan: Plan) -> bool:
    """`_call` from the event loop: the same call, its errors read alike."""
    try:
        rows = await loop_calls.fetch(
            database, accept_repository.CALL, accept_repository.call_params(plan), commits=True
        )
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return False
        raise
    return accept_repository.accepted(rows)


def _write_sqlite(database: Database, plan: Plan) -> bool:
    """True once the list committed the accept; False, having written nothing, when the
    reference path must decide."""
    try:
        clearing_id = database.transaction(lambda connection: accept_repository.write_statements(connection, plan))
    except Refused as refused:
        _refused(database, plan, refused)
        return False
    return _written(database, plan, clearing_id)


def _refused(database: Database, plan: Plan, refused: Refused) -> None:
    if refused.clearing_unknown:
        ledger.system_account_ids(database).forget(plan.tenant_id, [plan.clearing.code])


def _written(database: Database, plan: Plan, clearing_id: str | None) -> bool:
    """Whether the list committed the accept (the clearing account's id, now cached)."""
    if clearing_id is None:
        return False
    ledger.system_account_ids(database).put(plan.tenant_id, {plan.clearing.code: clearing_id})
    return True
