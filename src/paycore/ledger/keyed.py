"""A transfer created under an idempotency key: what `POST /v1/transfers` runs below HTTP.

The reference path is `idempotency.run` around `service.create_transfer`: one transaction
holding the key, the transfer and its response (ADR 0004). A transfer that succeeds is instead
written by the data plane (ADR 0026): planned by `transfer_plan.py` from the spec, the
accounts' cached facts, the clock and new ids, then written by one call of
`paycore_create_transfer` on PostgreSQL (migration 0009, ADR 0011, in autocommit, so that an
account's row lock is held only inside the server) or by the fixed list of
`transfer_repository.py` on SQLite, in one transaction on the writer (ADR 0008's group commit).

The data plane commits only a success. Whatever else happens (the key exists, a refusal of the
request or of the write, a deadlock) has written nothing, and the reference path then runs from
the start and decides, so replays, fingerprint checks and recorded refusals are the reference
path's own. A lock wait past its bound is answered at once, with what the reference path
answers after the same wait. The key makes that safe: if the write did commit and only its
answer was lost, the reference path finds the key and replays it.

`create_transfer` is sync, on the caller's thread (the FastAPI route's worker thread).
`create_transfer_on_loop` is the thin edge's (ADR 0026 decision 4: no thread hop), the same
statements from the event loop: on PostgreSQL the accounts' facts this process has not seen
read, then the one call, each on a connection of the loop's (`db/loop_calls.py`; two round
trips at most, as on the thread); on SQLite the facts read on the loop (a WAL read) and the
fixed list handed to the writer (`idempotency.write_async`, `Database.transaction_async`). When
the data plane declines, the reference path runs on SQLite from the loop too
(`idempotency.run_on_loop`: it calls no processor), on PostgreSQL on one worker thread (it is
the rare path). A connection lost during PostgreSQL's call is `CommitOutcomeUnknown` either way.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import service, transfer_repository
from paycore.ledger.accounts import cached_account_facts, load_account_facts, load_account_facts_on_loop
from paycore.ledger.transfer_plan import STATUS_CREATED, NewIds, Plan, plan_transfer
from paycore.ledger.transfer_repository import KeyExists
from paycore.ledger.types import Account, Transfer, TransferSpec

BuildSpec = Callable[[int], TransferSpec]
Render = Callable[[Transfer], str]

# What the call may answer with, having written nothing, for the reference path to decide:
# its refusals (migrations 0009, 0010), the ledger's triggers' (0024: a system account, a
# flow's transfer), a deadlock, a serialization failure. A lock wait past
# lock_timeout is answered at once, as the reference path would answer it (a second wait
# would double the bound). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC004", "PC005", "40P01", "40001"})


def create_transfer(
    database: Database,
    scope: idempotency.KeyScope,
    build_spec: BuildSpec,
    render: Render,
    render_refusal: Callable[[DomainError], idempotency.Outcome],
    *,
    one_call: bool = True,
) -> tuple[idempotency.Outcome, bool]:
    """Create the transfer `build_spec(now_us)` describes, once per key. Returns (outcome,
    replayed), as `idempotency.run` does. `render` turns the created transfer into the
    response body; `one_call=False` forces the reference path (tests, benchmarks)."""
    if one_call:
        write = create_in_one_call if database.is_postgres else create_in_statements
        outcome = write(database, scope, build_spec, render)
        if outcome is not None:
            return outcome, False

    return idempotency.run(database, scope, _reference_effect(scope, build_spec, render), render_refusal)


async def create_transfer_on_loop(
    database: Database,
    scope: idempotency.KeyScope,
    build_spec: BuildSpec,
    render: Render,
    render_refusal: Callable[[DomainError], idempotency.Outcome],
) -> tuple[idempotency.Outcome, bool]:
    """`create_transfer` from the event loop: the data plane with no worker thread; the
    reference path from the loop on SQLite, on one worker thread on PostgreSQL."""
    outcome = await _data_plane_on_loop(database, scope, build_spec, render)
    if outcome is not None:
        return outcome, False
    effect = _reference_effect(scope, build_spec, render)
    return await idempotency.run_on_loop(database, scope, effect, render_refusal)


def _reference_effect(
    scope: idempotency.KeyScope, build_spec: BuildSpec, render: Render
) -> Callable[[Connection], idempotency.Outcome]:
    """The reference path's effect, inside `idempotency.run`'s transaction with the key."""

    def effect(connection: Connection) -> idempotency.Outcome:
        spec = build_spec(scope.now_us)
        transfer = service.create_transfer(
            connection, scope.tenant_id, spec, now_us=scope.now_us, idempotency_key=scope.key
        )
        return idempotency.Outcome(STATUS_CREATED, render(transfer))

    return effect


def create_in_one_call(
    database: Database, scope: idempotency.KeyScope, build_spec: BuildSpec, render: Render
) -> idempotency.Outcome | None:
    """PostgreSQL: the created transfer's outcome, committed by one call with its key; or
    None, having written nothing, when the reference path must decide."""
    spec = _spec(scope, build_spec)
    if spec is None:
        return None
    with database.autocommit() as connection:
        accounts = load_account_facts(connection, scope.tenant_id, [entry.account_id for entry in spec.entries])
        planned = _plan(scope, spec, accounts, render)
        if planned is None:
            return None
        try:
            return transfer_repository.create_call(connection, planned)  # None: the key exists
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


def create_in_statements(
    database: Database, scope: idempotency.KeyScope, build_spec: BuildSpec, render: Render
) -> idempotency.Outcome | None:
    """SQLite: the created transfer's outcome, committed by the fixed list with its key; or
    None, having written nothing, when the reference path must decide. The accounts' facts
    come from this process's cache; those it has not seen are read first, outside the write."""
    spec = _spec(scope, build_spec)
    if spec is None:
        return None
    wanted = [entry.account_id for entry in spec.entries]
    accounts = cached_account_facts(scope.tenant_id, wanted)
    if accounts.keys() != set(wanted):
        with database.read() as connection:
            accounts = load_account_facts(connection, scope.tenant_id, wanted)
    planned = _plan(scope, spec, accounts, render)
    if planned is None:
        return None
    try:
        return idempotency.write(
            database, scope, lambda connection: transfer_repository.write_statements(connection, planned)
        )
    except (KeyExists, DomainError):
        return None


async def _data_plane_on_loop(
    database: Database, scope: idempotency.KeyScope, build_spec: BuildSpec, render: Render
) -> idempotency.Outcome | None:
    """`create_in_one_call` or `create_in_statements` from the event loop: the same reads and
    writes, the same outcome, or None, having written nothing, for the reference path."""
    spec = _spec(scope, build_spec)
    if spec is None:
        return None
    accounts = await load_account_facts_on_loop(database, scope.tenant_id, [entry.account_id for entry in spec.entries])
    planned = _plan(scope, spec, accounts, render)
    if planned is None:
        return None
    if database.is_postgres:
        try:
            return await transfer_repository.create_call_on_loop(database, planned)  # None: the key exists
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise
    try:
        return await idempotency.write_async(
            database, scope, lambda connection: transfer_repository.write_statements(connection, planned)
        )
    except (KeyExists, DomainError):
        return None


def _spec(scope: idempotency.KeyScope, build_spec: BuildSpec) -> TransferSpec | None:
    try:
        return build_spec(scope.now_us)
    except DomainError:
        return None  # the reference path refuses it, after the key's replay where the key exists


def _plan(scope: idempotency.KeyScope, spec: TransferSpec, accounts: dict[str, Account], render: Render) -> Plan | None:
    """The plan, or None for a request the reference path must answer (a refusal, or a
    renderer the planner cannot cut)."""
    try:
        return plan_transfer(scope, spec, accounts, new_ids=new_ids(len(spec.entries)), render=render)
    except DomainError:
        return None


def new_ids(entries_count: int) -> NewIds:
    return NewIds(ids.new_id("txn"), tuple(ids.new_id("ent") for _ in range(entries_count)))
