"""The SQL of a hold's post or void and of a transfer's reversal on the data plane (ADR 0026):
the transfer's read, the one call on PostgreSQL, the fixed list on SQLite. Each writes a plan
(`resolve_plan.py`) as it is.

The read (both databases, on a thread's connection or from the event loop): the transfer the
path names, the transfer that resolved it (by the unique `(tenant_id, pending_id)` index) and
the entries of both (by their transfer's index), one statement.

PostgreSQL: migration 0055's `paycore_transfer_resolve` and `paycore_transfer_reverse`, each the
key's claim, the checks, the resolution or reversal, `paycore_ledger_move` (the accounts and
entries, with the balance limits of `paycore_create_transfer`, held to `paycore.ledger.limits` by
`tests/integration/ledger/test_limit_copies.py`) and the stored answer, in autocommit.

SQLite, in one transaction on the writer (ADR 0008's group commit), with the reference path's
own statements and checks (`postings.apply_account`, `repository.insert_resolution`,
`insert_reversal`): a post or void is the key's claim with its answer (known before the write:
the hold as it reads after), the resolution, each account's totals in id order, the posted
entries (none for a void): BEGIN IMMEDIATE and 5 statements for a two-entry hold posted, 4
voided. A reversal is each account's totals (whose RETURNING numbers its entries), the key's
claim with its answer, the reversal, its entries: BEGIN IMMEDIATE and 5.

Both write a success only. A refusal (a `DomainError` out of `apply_account`, `Refused`: resolved
or reversed already) or a key that exists (`KeyExists`) rolls the list back, and the caller runs
the reference path, which decides, records and answers, as it always has.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.ledger import repository
from paycore.ledger.postings import apply_account
from paycore.ledger.resolve_plan import Found, Resolution
from paycore.ledger.transfer_plan import Plan
from paycore.ledger.transfer_repository import KeyExists, move_arrays
from paycore.ledger.types import ENTRY_FIELDS, RESOLUTION_STATUS, Entry, Transfer


class Refused(Exception):
    """The hold was resolved, or the transfer reversed, since it was read: roll back, and let
    the reference path refuse it."""


# ------------------------------------------------------------------ the read

_TRANSFER_FIELDS: Final = (
    "id",
    "kind",
    "pending_id",
    "reverses_id",
    "batch_id",
    "reference_type",
    "reference_id",
    "owner_id",
    "metadata",
    "expires_at_us",
    "created_at_us",
)
_WIDTH: Final = len(_TRANSFER_FIELDS)
READ: Final = driver.statement(
    f"SELECT {', '.join('t.' + name for name in _TRANSFER_FIELDS)},"
    f" {', '.join('r.' + name for name in _TRANSFER_FIELDS)},"
    f" {', '.join('e.' + name for name in ENTRY_FIELDS)}"
    " FROM ledger_transfers t"
    " LEFT JOIN ledger_transfers r ON r.tenant_id = t.tenant_id AND r.pending_id = t.id"
    " LEFT JOIN ledger_entries e ON e.tenant_id = t.tenant_id AND e.transfer_id IN (t.id, r.id)"
    " WHERE t.tenant_id = ? AND t.id = ?"
)


def read(connection: Connection, tenant_id: str, transfer_id: str) -> Found | None:
    """The transfer as `found_of_rows` makes it; None when there is no such transfer."""
    return found_of_rows(driver.fetch(connection, READ, (tenant_id, transfer_id)))


async def read_on_loop(database: Database, tenant_id: str, transfer_id: str) -> Found | None:
    """`read` from the event loop: on PostgreSQL on a connection of the loop's
    (`db/loop_calls.py`), on SQLite by a read transaction (a WAL read that never waits for the
    writer, as `accounts.load_account_facts_on_loop` reads)."""
    if database.is_postgres:
        return found_of_rows(await loop_calls.fetch(database, READ, (tenant_id, transfer_id), commits=False))
    with database.read() as connection:
        return read(connection, tenant_id, transfer_id)


def found_of_rows(rows: Sequence[tuple[Any, ...]]) -> Found | None:
    """`READ`'s rows as the views `service.get_transfer` builds: each transfer's entries in id
    order, a hold's status, resolution and posted amount from its resolution."""
    if not rows:
        return None
    first = rows[0]
    named = dict(zip(_TRANSFER_FIELDS, first[:_WIDTH], strict=True))
    resolution_named = dict(zip(_TRANSFER_FIELDS, first[_WIDTH : 2 * _WIDTH], strict=True))
    entries = sorted(
        (Entry(*row[2 * _WIDTH :]) for row in rows if row[2 * _WIDTH] is not None), key=lambda entry: entry.id
    )
    own = tuple(entry for entry in entries if entry.transfer_id == named["id"])
    resolution = None
    if resolution_named["id"] is not None:
        resolved = tuple(entry for entry in entries if entry.transfer_id == resolution_named["id"])
        resolution = _view(resolution_named, resolved, RESOLUTION_STATUS[resolution_named["kind"]], None, None)
    status = RESOLUTION_STATUS.get(named["kind"], "posted")
    resolved_by, posted_minor = None, None
    if named["kind"] == "pending":
        status = "pending" if resolution is None else resolution.status
        if resolution is not None:
            resolved_by = resolution.id
            posted_minor = sum(entry.amount_minor for entry in resolution.entries if entry.direction == "debit")
    assert len(own) + (0 if resolution is None else len(resolution.entries)) == len(entries), rows
    return Found(_view(named, own, status, resolved_by, posted_minor), resolution)


def _view(
    named: dict[str, Any], entries: tuple[Entry, ...], status: str, resolved_by: str | None, posted_minor: int | None
) -> Transfer:
    return Transfer(
        id=named["id"],
        kind=named["kind"],
        status=status,
        entries=entries,
        pending_id=named["pending_id"],
        reverses_id=named["reverses_id"],
        batch_id=named["batch_id"],
        reference_type=named["reference_type"],
        reference_id=named["reference_id"],
        metadata=json.loads(named["metadata"]),
        expires_at_us=named["expires_at_us"],
        created_at_us=named["created_at_us"],
        owner_id=named["owner_id"],
        resolved_by=resolved_by,
        posted_minor=posted_minor,
    )


# ------------------------------------------------------------------ PostgreSQL: one call

RESOLVE_CALL: Final = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_transfer_resolve(?, ?, ?, ?, ?, ?, ?, ?,"
        " ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[],"
        " ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::bigint[], ?, ?)"
    )
)
REVERSE_CALL: Final = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_transfer_reverse(?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[],"
        " ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::bigint[], ?, ?::text[])"
    )
)


def resolve_params(resolution: Resolution) -> list[Any]:
    """`paycore_transfer_resolve`'s parameters (migration 0055's order)."""
    plan, scope = resolution.plan, resolution.plan.scope
    values = plan.transfer_row
    assert values["pending_id"] == resolution.hold_id and values["kind"] == resolution.kind
    head = [scope.tenant_id, scope.key, scope.request_fingerprint, scope.expires_at_us]
    return [
        *head,
        resolution.hold_id,
        resolution.kind,
        values["id"],
        scope.now_us,
        *move_arrays(plan),
        resolution.outcome.status,
        resolution.outcome.body,
    ]


def reverse_params(plan: Plan) -> list[Any]:
    """`paycore_transfer_reverse`'s parameters (migration 0055's order)."""
    scope, values = plan.scope, plan.transfer_row
    assert values["reverses_id"] is not None and values["idempotency_key"] is None and values["owner_id"] is None
    head = [scope.tenant_id, scope.key, scope.request_fingerprint, scope.expires_at_us]
    return [
        *head,
        values["id"],
        values["reverses_id"],
        values["reference_type"],
        values["reference_id"],
        values["metadata"],
        scope.now_us,
        *move_arrays(plan),
        plan.answer_status,
        list(plan.answer_parts),
    ]


def resolve_call(connection: Connection, resolution: Resolution) -> idempotency.Outcome | None:
    """Post or void the hold in one call: the answer once committed, None (nothing written) if
    the key exists. A refusal comes out as DBAPIError with a SQLSTATE (PC001-PC005), having
    written nothing."""
    return _resolved(resolution, driver.fetch(connection, RESOLVE_CALL, resolve_params(resolution)))


async def resolve_call_on_loop(database: Database, resolution: Resolution) -> idempotency.Outcome | None:
    """`resolve_call` from the event loop, on a connection of the loop's (no worker thread); a
    connection lost during it is `CommitOutcomeUnknown`, as on a thread."""
    rows = await loop_calls.fetch(database, RESOLVE_CALL, resolve_params(resolution), commits=True)
    return _resolved(resolution, rows)


def reverse_call(connection: Connection, plan: Plan) -> idempotency.Outcome | None:
    """Reverse in one call: the answer once committed, None (nothing written) if the key
    exists. A refusal comes out as DBAPIError with a SQLSTATE, having written nothing."""
    return _reversed(plan, driver.fetch(connection, REVERSE_CALL, reverse_params(plan)))


async def reverse_call_on_loop(database: Database, plan: Plan) -> idempotency.Outcome | None:
    """`reverse_call` from the event loop, as `resolve_call_on_loop`."""
    return _reversed(plan, await loop_calls.fetch(database, REVERSE_CALL, reverse_params(plan), commits=True))


def _resolved(resolution: Resolution, rows: Sequence[tuple[Any, ...]]) -> idempotency.Outcome | None:
    [(written,)] = rows
    return resolution.outcome if written else None


def _reversed(plan: Plan, rows: Sequence[tuple[Any, ...]]) -> idempotency.Outcome | None:
    sequences = repository.transfer_sequences(rows)
    return None if sequences is None else plan.answer(sequences)


# ------------------------------------------------------------------ SQLite: the fixed lists


def write_resolution(connection: Connection, resolution: Resolution) -> idempotency.Outcome:
    """Post or void the hold with the fixed list, inside the caller's transaction: its answer.
    Raises `KeyExists`, `Refused` or the refusal of `apply_account` having written what the
    caller's rollback undoes."""
    plan, outcome = resolution.plan, resolution.outcome
    if not idempotency.claim_answered(connection, plan.scope, outcome):
        raise KeyExists(plan.scope.key)
    if not repository.insert_resolution(connection, plan.transfer_row):
        raise Refused(f"the hold {resolution.hold_id} was resolved since it was read")
    counts = _apply_moves(connection, plan)
    if plan.entry_rows:
        repository.insert_entries(connection, plan.numbered_entries(plan.sequences(counts)))
    return outcome


def write_reversal(connection: Connection, plan: Plan) -> idempotency.Outcome:
    """Reverse with the fixed list, inside the caller's transaction: its answer. Raises as
    `write_resolution`."""
    sequences = plan.sequences(_apply_moves(connection, plan))  # in id order, as every transfer takes them
    outcome = plan.answer(sequences)
    if not idempotency.claim_answered(connection, plan.scope, outcome):
        raise KeyExists(plan.scope.key)
    if not repository.insert_reversal(connection, plan.transfer_row):
        raise Refused(f"the transfer {plan.transfer_row['reverses_id']} was reversed since it was read")
    repository.insert_entries(connection, plan.numbered_entries(sequences))
    return outcome


def _apply_moves(connection: Connection, plan: Plan) -> dict[str, int]:
    """Each account's totals moved, in id order, checked by the reference path's own
    `apply_account`: each account's entry count after."""
    return {
        move.account_id: apply_account(
            connection,
            plan.scope.tenant_id,
            move.account_id,
            move.delta,
            move.entries_added,
            normal_balance=move.normal_balance,
            guarded=move.guarded,
            prefix="",
        )
        for move in plan.moves
    }
