"""A batch of transfers created under an idempotency key: what `POST /v1/transfers/batch` runs
below HTTP.

The reference path is `idempotency.run` around `service.create_batch`: one transaction holding
the key's claim, the batch (`batch.write_batch`: one call of `paycore_create_batch` on
PostgreSQL) and the key's answer, three statements and a commit on PostgreSQL. A batch that
succeeds is instead written by the data plane (ADR 0026), as a transfer is (`keyed.py`):
planned by `batch.plan_batch` from the specs, the accounts' facts, the clock and new ids, its
answer rendered with every sequence number 0 and cut there (`transfer_plan.cut_at_sequences`),
then written

- on PostgreSQL by one call, in autocommit, of migration 0050's `paycore_create_batch`, which
  claims the key (queued on its advisory lock as every claim is), calls the batch's own
  function (0019, 0025, 0047: the accounts locked, checked and updated, the rows inserted) and
  stores the answer with the sequence numbers it handed out;
- on SQLite by a fixed list in one transaction on the writer (ADR 0008's group commit): each
  account's totals updated once (`batch.apply_moves`, which checks the moves in order under the
  write lock with the reference path's rules), the key's claim with its answer (which needs the
  sequence numbers those UPDATEs handed out, so it comes after them), the transfers and the
  entries by multi-row INSERTs: BEGIN IMMEDIATE and 5 statements for a batch of up to 500
  transfers between two accounts (the reference path: BEGIN IMMEDIATE and 7, the key's claim,
  the accounts' read and the answer's record apart).

The data plane commits only a success. Whatever else happens (a refusal, of the request or of
the write; the key exists; a deadlock) has written nothing, and the reference path then runs
from the start and decides, so replays, fingerprint checks, the earlier refusal reported first
and recorded refusals are its own. A lock wait past its bound is answered at once, with what
the reference path answers after the same wait.

`create_batch` is sync, on the caller's thread (the FastAPI route's worker thread).
`create_batch_on_loop` is the thin edge's (ADR 0026 decision 4: no thread hop), as
`keyed.create_transfer_on_loop` is a transfer's: the accounts' facts and PostgreSQL's one call
on the loop's connections (`db/loop_calls.py`), SQLite's facts read on the loop and its list
handed to the writer (`idempotency.write_async`); the reference path from the loop on SQLite
(`idempotency.run_on_loop`), on one worker thread on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import batch, batch_repository, repository, service
from paycore.ledger.accounts import cached_account_facts, load_account_facts, load_account_facts_on_loop
from paycore.ledger.postings import check_entries
from paycore.ledger.transfer_plan import STATUS_CREATED, cut_at_sequences, joined
from paycore.ledger.transfer_repository import KeyExists
from paycore.ledger.types import Account, Transfer, TransferSpec, new_transfer_view

BuildSpecs = Callable[[int], Sequence[TransferSpec]]
Render = Callable[[str, Sequence[Transfer]], str]  # (the batch's id, its transfers) -> the body

# What the call may answer with, having written nothing, for the reference path to decide: the
# ledger's triggers' refusals (migration 0024: a system account, a flow's transfer), a deadlock,
# a serialization failure, a schema older than migration 0050 (no such function: a rolling
# deploy), a statement Citus will not run on the tenant's node. A lock wait past lock_timeout
# is answered at once, as the reference path would answer it. Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC004", "PC005", "40P01", "40001", "42883", "0A000"})


@dataclass(frozen=True)
class KeyedBatch:
    """A batch planned whole (one call, one list) with its key and its answer's parts."""

    scope: idempotency.KeyScope
    batch_id: str
    plan: batch.BatchPlan
    answer_parts: tuple[str, ...]  # the body, cut at each entry's sequence number, in entry order

    def answer(self, first_sequences: Sequence[int]) -> idempotency.Outcome:
        """The answer, from each move's first sequence number: numbers the plan's entries."""
        batch.number_entries(self.plan, first_sequences)
        sequences = [row["account_sequence"] for rows in self.plan.entries for row in rows]
        return idempotency.Outcome(STATUS_CREATED, joined(self.answer_parts, sequences))


class _LeftToReference(Exception):
    """The fixed list met a refusal: roll back what it wrote; the reference path decides."""


def create_batch(
    database: Database,
    scope: idempotency.KeyScope,
    build_specs: BuildSpecs,
    render: Render,
    render_refusal: Callable[[DomainError], idempotency.Outcome],
    *,
    one_call: bool = True,
) -> tuple[idempotency.Outcome, bool]:
    """Create the batch `build_specs(now_us)` describes, once per key. Returns (outcome,
    replayed), as `idempotency.run` does; `one_call=False` forces the reference path (tests,
    benchmarks)."""
    if one_call:
        write = create_in_one_call if database.is_postgres else create_in_statements
        outcome = write(database, scope, build_specs, render)
        if outcome is not None:
            return outcome, False

    return idempotency.run(database, scope, _reference_effect(scope, build_specs, render), render_refusal)


async def create_batch_on_loop(
    database: Database,
    scope: idempotency.KeyScope,
    build_specs: BuildSpecs,
    render: Render,
    render_refusal: Callable[[DomainError], idempotency.Outcome],
) -> tuple[idempotency.Outcome, bool]:
    """`create_batch` from the event loop: the data plane with no worker thread; the reference
    path from the loop on SQLite, on one worker thread on PostgreSQL."""
    outcome = await _data_plane_on_loop(database, scope, build_specs, render)
    if outcome is not None:
        return outcome, False
    effect = _reference_effect(scope, build_specs, render)
    return await idempotency.run_on_loop(database, scope, effect, render_refusal)


def _reference_effect(
    scope: idempotency.KeyScope, build_specs: BuildSpecs, render: Render
) -> Callable[[Connection], idempotency.Outcome]:
    """The reference path's effect, inside `idempotency.run`'s transaction with the key."""

    def effect(connection: Connection) -> idempotency.Outcome:
        specs = list(build_specs(scope.now_us))
        batch_id, created = service.create_batch(
            connection, scope.tenant_id, specs, now_us=scope.now_us, idempotency_key=scope.key
        )
        return idempotency.Outcome(STATUS_CREATED, render(batch_id, created))

    return effect


def create_in_one_call(
    database: Database, scope: idempotency.KeyScope, build_specs: BuildSpecs, render: Render
) -> idempotency.Outcome | None:
    """PostgreSQL: the batch's outcome, committed by one call with its key; or None, having
    written nothing, when the reference path must decide."""
    specs = _specs(scope, build_specs)
    if specs is None:
        return None
    with database.autocommit() as connection:
        accounts = load_account_facts(connection, scope.tenant_id, _account_ids(specs))
        planned = _plan(scope, specs, accounts, render)
        if planned is None:
            return None
        try:
            first_sequences = batch_repository.create_keyed_batch_call(connection, _call_params(planned))
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise
    return _called(planned, first_sequences)


def _call_params(planned: KeyedBatch) -> list[Any]:
    """Migration 0050's `paycore_create_batch`'s parameters: the key, the batch, its answer's parts."""
    scope = planned.scope
    return [
        scope.tenant_id,
        scope.key,
        scope.request_fingerprint,
        scope.expires_at_us,
        planned.batch_id,
        scope.now_us,
        *batch.call_arrays(planned.plan),
        STATUS_CREATED,
        list(planned.answer_parts),
    ]


def _called(planned: KeyedBatch, first_sequences: list[int] | None) -> idempotency.Outcome | None:
    """The call's outcome: None, having written nothing, if the key exists or the batch was refused."""
    if first_sequences is None:
        return None
    assert len(first_sequences) == len(planned.plan.moves), (len(first_sequences), len(planned.plan.moves))
    return planned.answer(first_sequences)


def create_in_statements(
    database: Database, scope: idempotency.KeyScope, build_specs: BuildSpecs, render: Render
) -> idempotency.Outcome | None:
    """SQLite: the batch's outcome, committed by the fixed list with its key; or None, having
    written nothing, when the reference path must decide. The accounts' facts come from this
    process's cache; those it has not seen are read first, outside the write."""
    specs = _specs(scope, build_specs)
    if specs is None:
        return None
    wanted = _account_ids(specs)
    accounts = cached_account_facts(scope.tenant_id, wanted)
    if accounts.keys() != wanted:
        with database.read() as connection:
            accounts = load_account_facts(connection, scope.tenant_id, wanted)
    planned = _plan(scope, specs, accounts, render)
    if planned is None:
        return None
    try:
        return idempotency.write(database, scope, lambda connection: _write_statements(connection, planned, accounts))
    except (KeyExists, _LeftToReference):
        return None


async def _data_plane_on_loop(
    database: Database, scope: idempotency.KeyScope, build_specs: BuildSpecs, render: Render
) -> idempotency.Outcome | None:
    """`create_in_one_call` or `create_in_statements` from the event loop: the same reads and
    writes, the same outcome, or None, having written nothing, for the reference path."""
    specs = _specs(scope, build_specs)
    if specs is None:
        return None
    accounts = await load_account_facts_on_loop(database, scope.tenant_id, _account_ids(specs))
    planned = _plan(scope, specs, accounts, render)
    if planned is None:
        return None
    if database.is_postgres:
        try:
            first_sequences = await batch_repository.create_keyed_batch_call_on_loop(database, _call_params(planned))
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise
        return _called(planned, first_sequences)
    try:
        return await idempotency.write_async(
            database, scope, lambda connection: _write_statements(connection, planned, accounts)
        )
    except (KeyExists, _LeftToReference):
        return None


def _write_statements(connection: Connection, planned: KeyedBatch, accounts: dict[str, Account]) -> idempotency.Outcome:
    """The fixed list, inside the caller's write transaction: its answer. Raises `KeyExists` or
    `_LeftToReference` having written what the caller's rollback undoes."""
    scope, plan = planned.scope, planned.plan
    first_sequences = batch.apply_moves(connection, scope.tenant_id, plan, accounts)
    if first_sequences is None:
        raise _LeftToReference(scope.key)
    outcome = planned.answer(first_sequences)
    if not idempotency.claim_answered(connection, scope, outcome):
        raise KeyExists(scope.key)
    batch_repository.insert_transfers(connection, plan.transfers)
    repository.insert_entries(connection, [row for rows in plan.entries for row in rows])
    return outcome


def _specs(scope: idempotency.KeyScope, build_specs: BuildSpecs) -> list[TransferSpec] | None:
    try:
        specs = list(build_specs(scope.now_us))
    except DomainError:
        return None  # the reference path refuses it, after the key's replay where the key exists
    return specs if 0 < len(specs) <= batch.TRANSFERS_PER_CALL_MAX else None


def _account_ids(specs: Sequence[TransferSpec]) -> set[str]:
    return {entry.account_id for spec in specs for entry in spec.entries}


def _plan(
    scope: idempotency.KeyScope, specs: Sequence[TransferSpec], accounts: dict[str, Account], render: Render
) -> KeyedBatch | None:
    """The batch planned with its answer's parts, or None for a batch the reference path must
    answer (a transfer it refuses, wherever it is in the batch, or a renderer this cannot cut)."""
    try:
        for index, spec in enumerate(specs):
            check_entries(spec, accounts, f"transfers[{index}].")
    except DomainError:
        return None
    batch_id = ids.new_id("batch")
    plan = batch.plan_batch(scope.tenant_id, specs, 0, accounts, scope.now_us, batch_id)
    views = [new_transfer_view(values, rows) for values, rows in zip(plan.transfers, plan.entries, strict=True)]
    parts = cut_at_sequences(render(batch_id, views))
    if len(parts) != sum(len(rows) for rows in plan.entries) + 1:
        return None
    return KeyedBatch(scope, batch_id, plan, parts)
