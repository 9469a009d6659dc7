"""A payout's creating phase (`POST /v1/payouts`) on the data plane (ADR 0026 step 3): plan,
then one write.

A payout's creation is one phase (the bank is called later, by a worker): the planner
(`create_plan.py`) makes every row and the answer; the write is one prepared call of
`paycore_payouts_create` on PostgreSQL (migration `*_payouts_create.py`, in autocommit: it
commits a success only) or the fixed list of `create_repository.py` on SQLite, in one
transaction on the writer (ADR 0008's group commit). The answer (201 and the payout's JSON,
its history the birth event) is the plan's, stored with the key in the same write.

The reference path (the route's effect: `service.schedule` and the `api_call` event inside
`idempotency.run`, through SQLAlchemy Core) stays the home of everything that is not a success
written at once, as ADR 0011 left it for transfers and `credits/create.py` for credits: a key
that exists (its replay, or `idempotency_key_reused`), a request its rules refuse (a bank
account, beneficiary, rail or date: its 400, after the key's replay where the key exists), a
source that is missing, in another currency or short of available funds (the hold's guard,
checked under the source's row lock by both writes, as `ledger.create_transfer` checks it: the
reference path refuses and records it), a limit, a stale cached id, and a schema below the
function's revision (SQLSTATE 42883). The fast write has then written nothing; the key makes
the fallback safe: a fast write that committed is found by the reference path's claim and
replayed, never written twice. A lock wait past its bound is answered at once, as the
reference path answers it (`idempotency.waited_too_long`).

`create` is sync, on the caller's thread (the FastAPI route's worker thread); on SQLite
`Database.transaction` joins the same group commit queue as `transaction_async`. The thin edge
creates from the event loop with no worker thread (`create_on_loop`, ADR 0026 decision 4): on
PostgreSQL the same call awaited on a connection of the loop's own (`db/loop_calls.py`: a
connection lost during it is `CommitOutcomeUnknown`, as on the thread), its errors read by the
same rule (`idempotency.left_to_reference`); on SQLite the same list handed to the writer's group commit
(`Database.transaction_async`, the statements on the loop). The same statements either way.
Nothing here logs a beneficiary's account number or IBAN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.payouts import create_repository
from paycore.payouts.create_plan import Encode, NewIds, Plan, in_transit_code, plan_create
from paycore.payouts.create_repository import Refused
from paycore.payouts.types import NewPayout

R = TypeVar("R")

# What the call may answer with, having written nothing, for the reference path to decide: its
# refusals (a total's range, insufficient available funds, the balance limit, a source missing,
# in another currency or a system account), a deadlock, a serialization failure, and a schema
# older than the function (no such function: this code runs from OLDEST_COMPATIBLE_REVISION
# on). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC010", "40P01", "40001", "42883"})


def create(
    database: Database,
    scope: KeyScope,
    new: NewPayout,
    *,
    actor: str,
    encode: Encode,
    reference: Callable[[], R],
) -> Outcome | R:
    """The payout created (stored `scheduled`, its hold, its two events, its key with the
    answer): the answer (201); or, when the data plane wrote nothing, what `reference` (the
    reference path) answers."""
    plan = _plan(database, scope, new, actor, encode)
    if plan is not None and (_call(database, plan) if database.is_postgres else _write_sqlite(database, plan)):
        return plan.answer
    return reference()


async def create_on_loop(
    database: Database, scope: KeyScope, new: NewPayout, *, actor: str, encode: Encode
) -> Outcome | None:
    """`create` from the event loop, no worker thread: the answer (201) once the payout is
    written, or None, having written nothing, when the reference path must decide (the caller
    runs it). On PostgreSQL the one call awaited on a connection of the loop; on SQLite the
    list handed to the writer (`Database.transaction_async`)."""
    plan = _plan(database, scope, new, actor, encode)
    if plan is None:
        return None
    if database.is_postgres:
        written = await _call_on_loop(database, plan)
    else:
        try:
            in_transit_id = await database.transaction_async(
                lambda connection: create_repository.write_statements(connection, plan)
            )
        except Refused as refused:
            _refused(database, plan, refused)
            return None
        written = _written(database, plan, in_transit_id)
    return plan.answer if written else None


def _plan(database: Database, scope: KeyScope, new: NewPayout, actor: str, encode: Encode) -> Plan | None:
    # PostgreSQL's call ensures the accounts itself, whatever this process has seen.
    code = in_transit_code(new.currency)
    cached = None if database.is_postgres else ledger.system_account_ids(database).get(scope.tenant_id, code)
    return plan_create(
        scope,
        new,
        actor=actor,
        in_transit_id=cached,
        context=EventContext.current(),  # this request's: the write may run on another thread
        new_ids=NewIds(
            payout_id=ids.new_id("po"),
            transfer_id=ids.new_id("txn"),
            account_ids=(ids.new_id("acct"), ids.new_id("acct"), ids.new_id("acct"), ids.new_id("acct")),
            debit_entry_id=ids.new_id("ent"),
            credit_entry_id=ids.new_id("ent"),
            birth_event_id=ids.new_id("evt"),
            api_call_event_id=ids.new_id("evt"),
        ),
        encode=encode,
    )


def _call(database: Database, plan: Plan) -> bool:
    """True once the call committed the payout; False, having written nothing, when the
    reference path must decide."""
    with database.autocommit() as connection:
        try:
            return create_repository.create_call(connection, plan)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return False
            raise


async def _call_on_loop(database: Database, plan: Plan) -> bool:
    """`_call` from the event loop: the same call, its errors read alike."""
    try:
        rows = await loop_calls.fetch(
            database, create_repository.CALL, create_repository.call_params(plan), commits=True
        )
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return False
        raise
    return create_repository.created(rows)


def _write_sqlite(database: Database, plan: Plan) -> bool:
    """True once the list committed the payout; False, having written nothing, when the
    reference path must decide."""
    try:
        in_transit_id = database.transaction(lambda connection: create_repository.write_statements(connection, plan))
    except Refused as refused:
        _refused(database, plan, refused)
        return False
    return _written(database, plan, in_transit_id)


def _refused(database: Database, plan: Plan, refused: Refused) -> None:
    if refused.in_transit_unknown:
        ledger.system_account_ids(database).forget(plan.tenant_id, [plan.in_transit.code])


def _written(database: Database, plan: Plan, in_transit_id: str | None) -> bool:
    """Whether the list committed the payout (the in-transit account's id, now cached)."""
    if in_transit_id is None:
        return False
    ledger.system_account_ids(database).put(plan.tenant_id, {plan.in_transit.code: in_transit_id})
    return True
