"""A hold posted or voided, or a transfer reversed, under an idempotency key: what
`POST /v1/transfers/{id}/post`, `/void` and `/reverse` run below HTTP.

The reference path is `idempotency.run` around `service.post_pending`, `void_pending` or
`reverse_transfer`: one transaction holding the key, the change and its answer (ADR 0004). A
change that succeeds is instead written by the data plane (ADR 0026), as a transfer is
(`keyed.py`): the transfer read (`resolve_repository.read`: it, its resolution and their entries,
one statement) with its accounts' facts (this process's cache), planned by `resolve_plan.py`,
then written by one call of migration 0055's `paycore_transfer_resolve` or
`paycore_transfer_reverse` on PostgreSQL (in autocommit, so that an account's row lock is held
only inside the server) or by the fixed list of `resolve_repository.py` on SQLite, in one
transaction on the writer (ADR 0008's group commit).

The data plane commits only a success. Whatever else happens (the key exists, a refusal of the
request or of the write, a deadlock, a schema without the functions) has written nothing, and
the reference path then runs from the start and decides, so replays, fingerprint checks and
recorded refusals are the reference path's own. A lock wait past its bound is answered at once,
with what the reference path answers after the same wait.

`answer` is sync, on the caller's thread (the FastAPI route's worker thread). `answer_on_loop`
is the thin edge's (ADR 0026 decision 4: no thread hop): the same statements from the event
loop, PostgreSQL's read and call on connections of the loop's (`db/loop_calls.py`), SQLite's read
a WAL read on the loop and its list handed to the writer (`idempotency.write_async`). When the
data plane declines, the reference path runs on SQLite from the loop too
(`idempotency.run_on_loop`), on PostgreSQL on one worker thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit.errors import DomainError
from paycore.ledger import resolve_plan, resolve_repository, service
from paycore.ledger.accounts import load_account_facts, load_account_facts_on_loop
from paycore.ledger.keyed import new_ids
from paycore.ledger.resolve_plan import Found, Resolution
from paycore.ledger.resolve_repository import Refused
from paycore.ledger.transfer_plan import STATUS_CREATED, Plan
from paycore.ledger.transfer_repository import KeyExists
from paycore.ledger.types import Account, Transfer

Render = Callable[[Transfer], str]
RenderRefusal = Callable[[DomainError], idempotency.Outcome]
P = TypeVar("P", Resolution, Plan)

# What the calls may answer with, having written nothing, for the reference path to decide: their
# refusals (migration 0055: PC001-PC004), the ledger's triggers' (0024: PC005), a deadlock, a
# serialization failure, a schema without the functions (42883: this code runs from
# OLDEST_COMPATIBLE_REVISION on), a statement Citus cannot run (0A000). A lock wait past
# lock_timeout is answered at once (`idempotency.left_to_reference`). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC004", "PC005", "40P01", "40001", "42883", "0A000"})


@dataclass(frozen=True)
class Operation(Generic[P]):
    """One of the three, for one request: its plan from the transfer as read, its write on
    either database, and the reference path's effect."""

    transfer_id: str
    plan: Callable[[idempotency.KeyScope, Found, Mapping[str, Account]], P | None]
    call: Callable[[Connection, P], idempotency.Outcome | None]
    call_on_loop: Callable[[Database, P], Awaitable[idempotency.Outcome | None]]
    statements: Callable[[Connection, P], idempotency.Outcome]
    effect: Callable[[idempotency.KeyScope], Callable[[Connection], idempotency.Outcome]]


def post(transfer_id: str, amount_minor: int | None, render: Render) -> Operation[Resolution]:
    """The hold posted, whole (`amount_minor` None) or in part."""
    return _resolution(transfer_id, True, amount_minor, render)


def void(transfer_id: str, render: Render) -> Operation[Resolution]:
    return _resolution(transfer_id, False, None, render)


def reverse(transfer_id: str, metadata: dict[str, str] | None, render: Render) -> Operation[Plan]:
    """The transfer (a posted hold's post) reversed; `metadata` None keeps the original's."""

    def plan(scope: idempotency.KeyScope, found: Found, accounts: Mapping[str, Account]) -> Plan | None:
        original = resolve_plan.reversed_transfer(found)
        if original is None:
            return None
        ids = new_ids(len(original.entries))
        return resolve_plan.plan_reversal(scope, found, accounts, metadata=metadata, new_ids=ids, render=render)

    def effect(scope: idempotency.KeyScope) -> Callable[[Connection], idempotency.Outcome]:
        def reversed_by_reference(connection: Connection) -> idempotency.Outcome:
            transfer = service.reverse_transfer(
                connection, scope.tenant_id, transfer_id, now_us=scope.now_us, owner_id=None, metadata=metadata
            )
            return idempotency.Outcome(STATUS_CREATED, render(transfer))

        return reversed_by_reference

    return Operation(
        transfer_id,
        plan,
        resolve_repository.reverse_call,
        resolve_repository.reverse_call_on_loop,
        resolve_repository.write_reversal,
        effect,
    )


def _resolution(transfer_id: str, posted: bool, amount_minor: int | None, render: Render) -> Operation[Resolution]:
    def plan(scope: idempotency.KeyScope, found: Found, accounts: Mapping[str, Account]) -> Resolution | None:
        ids = new_ids(resolve_plan.entries_to_make(found, posted))
        return resolve_plan.plan_resolution(
            scope, found, accounts, post=posted, amount_minor=amount_minor, new_ids=ids, render=render
        )

    def effect(scope: idempotency.KeyScope) -> Callable[[Connection], idempotency.Outcome]:
        def resolved_by_reference(connection: Connection) -> idempotency.Outcome:
            tenant_id, now_us = scope.tenant_id, scope.now_us
            if posted:
                transfer = service.post_pending(
                    connection, tenant_id, transfer_id, amount_minor=amount_minor, now_us=now_us, owner_id=None
                )
            else:
                transfer = service.void_pending(connection, tenant_id, transfer_id, now_us=now_us, owner_id=None)
            return idempotency.Outcome(resolve_plan.STATUS_RESOLVED, render(transfer))

        return resolved_by_reference

    return Operation(
        transfer_id,
        plan,
        resolve_repository.resolve_call,
        resolve_repository.resolve_call_on_loop,
        resolve_repository.write_resolution,
        effect,
    )


def answer(
    database: Database,
    scope: idempotency.KeyScope,
    operation: Operation[P],
    render_refusal: RenderRefusal,
    *,
    one_call: bool = True,
) -> tuple[idempotency.Outcome, bool]:
    """The operation, once per key: (outcome, replayed), as `idempotency.run` returns them.
    `one_call=False` forces the reference path (tests, benchmarks)."""
    if one_call:
        write = in_one_call if database.is_postgres else in_statements
        outcome = write(database, scope, operation)
        if outcome is not None:
            return outcome, False
    return idempotency.run(database, scope, operation.effect(scope), render_refusal)


async def answer_on_loop(
    database: Database, scope: idempotency.KeyScope, operation: Operation[P], render_refusal: RenderRefusal
) -> tuple[idempotency.Outcome, bool]:
    """`answer` from the event loop: the data plane with no worker thread; the reference path
    from the loop on SQLite, on one worker thread on PostgreSQL."""
    outcome = await _data_plane_on_loop(database, scope, operation)
    if outcome is not None:
        return outcome, False
    return await idempotency.run_on_loop(database, scope, operation.effect(scope), render_refusal)


def in_one_call(database: Database, scope: idempotency.KeyScope, operation: Operation[P]) -> idempotency.Outcome | None:
    """PostgreSQL: the outcome, committed by one call with its key, after the transfer's read;
    or None, having written nothing, when the reference path must decide."""
    with database.autocommit() as connection:
        found = resolve_repository.read(connection, scope.tenant_id, operation.transfer_id)
        if found is None:
            return None  # transfer_not_found
        accounts = load_account_facts(connection, scope.tenant_id, resolve_plan.accounts_to_read(found))
        planned = _plan(operation, scope, found, accounts)
        if planned is None:
            return None
        try:
            return operation.call(connection, planned)  # None: the key exists
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


def in_statements(
    database: Database, scope: idempotency.KeyScope, operation: Operation[P]
) -> idempotency.Outcome | None:
    """SQLite: the outcome, committed by the fixed list with its key, the transfer read before,
    outside the write; or None, having written nothing, when the reference path must decide."""
    with database.read() as connection:
        found = resolve_repository.read(connection, scope.tenant_id, operation.transfer_id)
        if found is None:
            return None
        accounts = load_account_facts(connection, scope.tenant_id, resolve_plan.accounts_to_read(found))
    planned = _plan(operation, scope, found, accounts)
    if planned is None:
        return None
    try:
        return idempotency.write(database, scope, lambda connection: operation.statements(connection, planned))
    except (KeyExists, Refused, DomainError):
        return None


async def _data_plane_on_loop(
    database: Database, scope: idempotency.KeyScope, operation: Operation[P]
) -> idempotency.Outcome | None:
    """`in_one_call` or `in_statements` from the event loop: the same reads and writes, the
    same outcome, or None, having written nothing, for the reference path."""
    found = await resolve_repository.read_on_loop(database, scope.tenant_id, operation.transfer_id)
    if found is None:
        return None
    accounts = await load_account_facts_on_loop(database, scope.tenant_id, resolve_plan.accounts_to_read(found))
    planned = _plan(operation, scope, found, accounts)
    if planned is None:
        return None
    if database.is_postgres:
        try:
            return await operation.call_on_loop(database, planned)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise
    try:
        return await idempotency.write_async(
            database, scope, lambda connection: operation.statements(connection, planned)
        )
    except (KeyExists, Refused, DomainError):
        return None


def _plan(
    operation: Operation[P], scope: idempotency.KeyScope, found: Found, accounts: Mapping[str, Account]
) -> P | None:
    """The plan, or None for a request the reference path must answer (a refusal)."""
    if accounts.keys() != set(resolve_plan.accounts_to_read(found)):
        return None  # an account not found: never for a transfer's own, but the reference path decides
    try:
        return operation.plan(scope, found, accounts)
    except DomainError:
        return None
