"""Creating a credit, the data plane's first phase (ADR 0026): plan, then one write.

A credit is one phase (no processor): the planner (`plan.py`) makes every row and the answer;
the write is one prepared call of `paycore_credits_create` on PostgreSQL (migration 0026, in
autocommit: it commits a success only) or the fixed list of `create_repository.py` on SQLite,
in one transaction on the writer (ADR 0008's group commit).

The reference path (`service.create_credit` inside `idempotency.run_async`) stays the home of
everything that is not a success written at once, as ADR 0011 left it for transfers: a key
that exists (its replay, or `idempotency_key_reused`), a request the planner refuses (its
400, after the key's replay where the key exists: the key is looked at first, as always), and
a refusal of the write (a limit: recorded against the key), which rolls the fast write back.
The key makes the fallback safe: a fast write that committed is found by the reference path's
claim and replayed, never written twice.

From the event loop with no worker thread for the write (ADR 0026 decision 4): on PostgreSQL
the one call awaited on a connection of the loop's own (`db/loop_calls.py`: its errors read as
on a worker thread's connection, a lock wait past its bound answered at once, a connection lost
during the call `CommitOutcomeUnknown`); on SQLite the list handed to the writer
(`idempotency.write_async`). The reference path runs from the loop on SQLite; on PostgreSQL
`Database.transaction_async` runs it on a worker thread (the rare path).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.credits import create_repository, service
from paycore.credits.create_repository import Refused
from paycore.credits.plan import STATUS_CREATED, Credit, CreditLine, CreditRequest, NewIds, Plan, plan_credit
from paycore.db import loop_calls
from paycore.db.engine import Database, is_lock_timeout
from paycore.idempotency import service as idempotency
from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import service as ledger

Render = Callable[[Credit], str]
RenderRefusal = Callable[[DomainError], idempotency.Outcome]

# What the call may answer with, having written nothing, for the reference path to decide: its
# refusals (migration 0026: a total's range, insufficient funds, the balance limit), a
# deadlock, a serialization failure, and a schema older than 0026 (no such function: this
# code runs from OLDEST_COMPATIBLE_REVISION on). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "40P01", "40001", "42883"})


async def create_credit(
    database: Database,
    scope: idempotency.KeyScope,
    lines: tuple[CreditLine, ...],
    *,
    enabled_currencies: frozenset[str],
    lines_max: int,
    render: Render,
    render_refusal: RenderRefusal,
) -> tuple[idempotency.Outcome, bool]:
    """The credit's answer, once per key: (outcome, replayed), as `idempotency.run_async`."""
    # PostgreSQL's call ensures the accounts itself, whatever this process has seen.
    cached = (lambda code: None) if database.is_postgres else _cached_account_id(database, scope.tenant_id)
    plan = _plan(scope, lines, enabled_currencies, lines_max, render, cached)
    if plan is not None:
        if database.is_postgres:
            written = await _call_on_loop(database, plan)
        else:
            written = await _write_sqlite(database, scope, plan)
        if written:
            return idempotency.Outcome(plan.answer_status, plan.answer_body), False

    def effect(connection: Connection) -> idempotency.Outcome:
        credit = service.create_credit(
            connection,
            scope.tenant_id,
            idempotency_key=scope.key,
            lines=lines,
            enabled_currencies=enabled_currencies,
            lines_max=lines_max,
            now_us=scope.now_us,
        )
        return idempotency.Outcome(STATUS_CREATED, render(credit))

    return await idempotency.run_async(database, scope, effect, render_refusal)


def _plan(
    scope: idempotency.KeyScope,
    lines: tuple[CreditLine, ...],
    enabled_currencies: frozenset[str],
    lines_max: int,
    render: Render,
    known_account_ids: Callable[[str], str | None],
) -> Plan | None:
    """The plan, or None for a request the reference path must answer (after its key)."""
    assert scope.expires_at_us is None, "a credit's key is kept forever (SPEC §3.1)"
    request = CreditRequest(scope.tenant_id, scope.key, scope.request_fingerprint, lines)
    try:
        return plan_credit(
            request,
            enabled_currencies=enabled_currencies,
            lines_max=lines_max,
            known_account_ids=known_account_ids,
            now_us=scope.now_us,
            new_ids=_new_ids(),
            render=render,
        )
    except DomainError:
        return None


def _cached_account_id(database: Database, tenant_id: str) -> Callable[[str], str | None]:
    cache = ledger.system_account_ids(database)
    return lambda code: cache.get(tenant_id, code)


def _new_ids() -> NewIds:
    return NewIds(
        credit_id=ids.new_id("cr"),
        transfer_id=ids.new_id("txn"),
        balance_account_id=ids.new_id("acct"),
        issued_account_id=ids.new_id("acct"),
        debit_entry_id=ids.new_id("ent"),
        credit_entry_id=ids.new_id("ent"),
    )


async def _call_on_loop(database: Database, plan: Plan) -> bool:
    """True once the call committed the credit; False, having written nothing, when the
    reference path must decide. Awaited on a connection of the loop's own (`db/loop_calls.py`)."""
    try:
        rows = await loop_calls.fetch(
            database, create_repository.CALL, create_repository.call_params(plan), commits=True
        )
    except DBAPIError as error:
        if is_lock_timeout(error):
            raise idempotency.waited_too_long(error) from error
        if getattr(error.orig, "sqlstate", None) in _DECIDED_BY_REFERENCE:
            return False
        raise
    return create_repository.created(rows)


async def _write_sqlite(database: Database, scope: idempotency.KeyScope, plan: Plan) -> bool:
    """True once the list committed the credit; False, having written nothing, when the
    reference path must decide."""
    tenant_id = plan.credit.tenant_id
    try:
        found = await idempotency.write_async(
            database, scope, lambda connection: create_repository.write_statements(connection, plan)
        )
    except Refused:
        ledger.system_account_ids(database).forget(tenant_id, [account.template.code for account in plan.accounts])
        return False
    if found is None:
        return False
    ledger.system_account_ids(database).put(tenant_id, found)
    return True
