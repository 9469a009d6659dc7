"""A refund's creating phase on the data plane (ADR 0026 step 3): plan, then one write.

`POST /v1/payments/{payment_id}/refunds` stores the refund (its amount reserved on the payment,
held on the merchant's balance) and answers; a worker sends it to the processor later, so this
is the refund's one phase in a request. The planner (`create_plan.py`) makes every row and the
answer; the write is one prepared call of `paycore_refunds_create` on PostgreSQL (in
autocommit: it commits a success only) or the fixed list of `create_repository.py` on SQLite,
in one transaction on the writer (ADR 0008's group commit).

The planner needs the payment's immutable facts (its currency and the account it credited) and,
on SQLite, the tenant's processor clearing account: from this process's bounded caches
(`_payment_facts`, `ledger.system_account_ids`), or read where they are not there: on
PostgreSQL before the call on its connection (one more round trip, once per payment and
process, no commit), on SQLite inside the write's own transaction (one or two more statements).
The write checks them again under its locks. The tenant's approval threshold is read by the
write itself, in the ceiling's UPDATE (both databases): no cache to invalidate when a tenant
changes it, and no statement of its own.

`reference` (today's path: `service.create_refund` inside `idempotency.run`, in one transaction
through SQLAlchemy Core) stays the home of everything that is not a plain success written at
once, as ADR 0011 left it for transfers: a key that exists (its replay, or
`idempotency_key_reused`), a bad amount, a payment that is missing, not succeeded or without
room for the amount (its refusal, recorded against the key), a refund that needs four-eyes
approval (stored `requires_approval`), a limit, and a schema without the function (SQLSTATE
42883). The fast write has then written nothing; the key makes the fallback safe: a fast write
that committed is found by the reference path's claim and replayed, never written twice.

`create_refund` is sync, on the caller's thread (the FastAPI route's worker thread). The refunds'
thin edge writes from the event loop with no worker thread (`write_on_loop`, ADR 0026 decision 4;
`create_on_loop.py` answers with it): on PostgreSQL the payment's read and the call awaited on
a connection of the loop's own (`db/loop_calls.py`: the same two round trips, the call's errors
read by the same rule, a connection lost during the call `CommitOutcomeUnknown` as on the
thread); on SQLite the same list, its reads inside the transaction, handed to the writer
(`Database.transaction_async`: the same group commit queue as `Database.transaction`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.refunds import ceiling, create_repository, service
from paycore.refunds.create_plan import STATUS_CREATED, NewIds, PaymentFacts, Plan, RefundRequest, Render, plan_create
from paycore.refunds.create_repository import Refused
from paycore.refunds.service import NewRefund
from paycore.tenants import settings as tenant_settings

RenderRefusal = Callable[[DomainError], Outcome]

# What the call may answer with, having written nothing, for the reference path to decide: its
# refusals (PC011: no succeeded payment with room for the amount within the approval threshold,
# or not the payment planned; PC001-PC003: a limit), a deadlock, a serialization failure, and a
# schema without the function (42883: this code runs from OLDEST_COMPATIBLE_REVISION on). Any
# other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC011", "40P01", "40001", "42883"})

Rows = list[tuple[Any, ...]]
Known = tuple[PaymentFacts, str | None]  # the payment's facts, the clearing account's id (SQLite)
PAYMENTS_CACHED_MAX = 100_000  # per database: the payments whose facts this process keeps
_PAYMENT_FACTS: WeakKeyDictionary[Database, dict[tuple[str, str], PaymentFacts]] = WeakKeyDictionary()


def create_refund(
    database: Database,
    scope: KeyScope,
    request: RefundRequest,
    *,
    render: Render,
    render_refusal: RenderRefusal,
) -> tuple[Outcome, bool]:
    """The refund's answer, once per key: (outcome, replayed), as `idempotency.run`."""
    write = _write_postgres if database.is_postgres else _write_sqlite
    written = write(database, scope, request, render)
    if written is not None:
        return written.answer, False
    return reference(database, scope, request, render=render, render_refusal=render_refusal)


def reference(
    database: Database,
    scope: KeyScope,
    request: RefundRequest,
    *,
    render: Render,
    render_refusal: RenderRefusal,
) -> tuple[Outcome, bool]:
    """Today's path, in one transaction: the key, the tenant's threshold, `service.create_refund`,
    the history read back, the answer."""
    return idempotency.run(database, scope, reference_effect(scope, request, render), render_refusal)


def reference_effect(scope: KeyScope, request: RefundRequest, render: Render) -> Callable[[Connection], Outcome]:
    """The reference path's effect, in the key's transaction (`idempotency.run`, or `run_async`
    from the event loop): the tenant's threshold, `service.create_refund`, the history read
    back, the answer."""

    def effect(connection: Connection) -> Outcome:
        threshold = tenant_settings.get(connection, scope.tenant_id).refund_approval_threshold_minor
        new = NewRefund(request.payment_id, request.amount_minor, request.reason, scope.key, threshold)
        refund = service.create_refund(connection, scope.tenant_id, new, now_us=scope.now_us, actor=request.actor)
        return Outcome(STATUS_CREATED, render(refund, service.history(connection, refund)))

    return effect


async def write_on_loop(database: Database, scope: KeyScope, request: RefundRequest, render: Render) -> Plan | None:
    """`create_refund`'s write from the event loop, no worker thread: the plan once written;
    None, having written nothing, when the reference path must decide."""
    if database.is_postgres:
        return await _write_postgres_on_loop(database, scope, request, render)
    try:
        return await database.transaction_async(_sqlite_work(database, scope, request, render))
    except Refused as refused:
        _refused(database, refused)
        return None


def _plan(scope: KeyScope, request: RefundRequest, render: Render, known: Known | None) -> Plan | None:
    """The plan, or None for a request the reference path must answer (after its key)."""
    if known is None:
        return None
    facts, clearing_id = known
    if clearing_id == facts.destination_account_id:
        return None  # the ledger's own rules decide
    try:
        return plan_create(
            scope,
            request,
            facts,
            clearing_account_id=clearing_id,
            context=EventContext.current(),  # this request's: the write may run on another thread
            new_ids=NewIds(
                refund_id=service.new_refund_id(),
                transfer_id=ids.new_id("txn"),
                debit_entry_id=ids.new_id("ent"),
                credit_entry_id=ids.new_id("ent"),
                event_id=ids.new_id("evt"),
            ),
            render=render,
        )
    except DomainError:
        return None


def _payment_facts(database: Database) -> dict[tuple[str, str], PaymentFacts]:
    cache = _PAYMENT_FACTS.get(database)
    if cache is None:  # two threads may both make one: one is dropped, nothing is wrong
        cache = _PAYMENT_FACTS.setdefault(database, {})
    return cache


def _cached(database: Database, tenant_id: str, payment_id: str) -> Known | None:
    """The payment's facts and (SQLite) the clearing account's id, from this process's caches."""
    facts = _payment_facts(database).get((tenant_id, payment_id))
    if facts is None or database.is_postgres:  # PostgreSQL's call finds the clearing account by its code
        return None if facts is None else (facts, None)
    clearing_id = ledger.system_account_ids(database).get(tenant_id, chart.processor_clearing(facts.currency))
    return None if clearing_id is None else (facts, clearing_id)


def _read(database: Database, connection: Connection, tenant_id: str, payment_id: str) -> Known | None:
    """The payment's facts and (SQLite) the clearing account's id, read and cached; None where
    the reference path must answer (no such payment, not succeeded, no clearing account)."""
    facts = _facts(database, tenant_id, payment_id, _read_payment(connection, tenant_id, payment_id))
    if facts is None or database.is_postgres:
        return None if facts is None else (facts, None)
    code = chart.processor_clearing(facts.currency)
    accounts = ledger.system_account_ids(database)
    clearing_id = accounts.get(tenant_id, code)
    if clearing_id is None:
        clearing = ledger.find_account_by_code(connection, tenant_id, code)
        if clearing is None:
            return None
        clearing_id = clearing.id
        accounts.put(tenant_id, {code: clearing_id})
    return facts, clearing_id


def _read_payment(connection: Connection, tenant_id: str, payment_id: str) -> Rows:
    return driver.fetch(connection, create_repository.PAYMENT_FACTS, (tenant_id, payment_id))


def _facts(database: Database, tenant_id: str, payment_id: str, rows: Rows) -> PaymentFacts | None:
    """The payment's facts from its row (`create_repository.PAYMENT_FACTS`), cached; None where
    the reference path must answer (no such payment, not succeeded, an authorization's)."""
    if not rows:
        return None
    status, capture_method, currency, destination_account_id = rows[0]
    if status != ceiling.REFUNDABLE_STATUS or capture_method == "manual":
        return None  # a manual payment's ceiling is what it captured: the reference path's (ADR 0029)
    facts = PaymentFacts(currency, destination_account_id)
    cache = _payment_facts(database)
    if len(cache) >= PAYMENTS_CACHED_MAX:
        cache.clear()
    cache[(tenant_id, payment_id)] = facts
    return facts


def _forget(database: Database, plan: Plan) -> None:
    """A cached fact the plan used was not this database's: read them again next time."""
    _payment_facts(database).pop((plan.tenant_id, plan.refund.payment_id), None)
    ledger.system_account_ids(database).forget(plan.tenant_id, [plan.clearing_code])


def _write_postgres(database: Database, scope: KeyScope, request: RefundRequest, render: Render) -> Plan | None:
    """The plan once the call committed it; None, having written nothing, when the reference
    path must decide. A payment this process has not seen is read first, on the same
    connection in autocommit (one more round trip, no commit)."""
    known = _cached(database, scope.tenant_id, request.payment_id)
    with database.autocommit() as connection:
        if known is None:
            known = _read(database, connection, scope.tenant_id, request.payment_id)
        plan = _plan(scope, request, render, known)
        if plan is None:
            return None
        try:
            return plan if create_repository.create_call(connection, plan) else None
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


async def _write_postgres_on_loop(
    database: Database, scope: KeyScope, request: RefundRequest, render: Render
) -> Plan | None:
    """`_write_postgres` from the event loop: the payment's read (where not cached) and the call,
    each awaited on a connection of the loop's own (`db/loop_calls.py`). The read commits
    nothing: a connection lost during it is `DatabaseUnavailable`, during the call the
    call's outcome is unknown (`CommitOutcomeUnknown`)."""
    tenant_id, payment_id = scope.tenant_id, request.payment_id
    known = _cached(database, tenant_id, payment_id)
    if known is None:
        rows = await loop_calls.fetch(database, create_repository.PAYMENT_FACTS, (tenant_id, payment_id), commits=False)
        facts = _facts(database, tenant_id, payment_id, rows)
        known = None if facts is None else (facts, None)
    plan = _plan(scope, request, render, known)
    if plan is None:
        return None
    try:
        rows = await loop_calls.fetch(
            database, create_repository.CALL, create_repository.call_params(plan), commits=True
        )
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return None
        raise
    return plan if create_repository.created(rows) else None


def _write_sqlite(database: Database, scope: KeyScope, request: RefundRequest, render: Render) -> Plan | None:
    """The plan once the list committed it; None, having written nothing, when the reference
    path must decide."""
    try:
        return database.transaction(_sqlite_work(database, scope, request, render))
    except Refused as refused:
        _refused(database, refused)
        return None


def _sqlite_work(
    database: Database, scope: KeyScope, request: RefundRequest, render: Render
) -> Callable[[Connection], Plan | None]:
    """The write's transaction, on the writer. Planned before it where the caches know the
    payment; else read and planned inside it (one more statement, no transaction of its own:
    the writer holds its lock a planner's time longer)."""
    cached = _plan(scope, request, render, _cached(database, scope.tenant_id, request.payment_id))

    def write(connection: Connection) -> Plan | None:
        plan = cached
        if plan is None:
            plan = _plan(scope, request, render, _read(database, connection, scope.tenant_id, request.payment_id))
        if plan is None:
            return None
        return plan if create_repository.write_statements(connection, plan) else None

    return write


def _refused(database: Database, refused: Refused) -> None:
    if refused.stale:
        _forget(database, refused.plan)
