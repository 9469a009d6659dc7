"""The SQL of a ledger transfer on the data plane (ADR 0026): the one call on PostgreSQL, the
fixed list of statements on SQLite. Each sends a `Plan` (`transfer_plan.py`) as it is.

PostgreSQL: `paycore_create_transfer` (migration 0009, ADR 0011), unchanged, made on a worker
thread's connection (`create_call`) or from the event loop (`create_call_on_loop`): `call_params`
is its parameters, read off the plan (the balance limits are the function's copies, held to
`paycore.ledger.limits` by `tests/integration/ledger/test_limit_copies.py`).

SQLite: in one transaction on the writer (ADR 0008's group commit), each account's totals in id
order (`postings.apply_account`: the reference path's own UPDATE with RETURNING and its own
checks of the range, the balance limit and no overdraft, so no rule is copied here), the key's
claim with its answer (which needs the sequence numbers the UPDATEs handed out, so it comes
after them), the transfer, its entries (one INSERT for up to 64): BEGIN IMMEDIATE and 5
statements for a transfer between two accounts (the reference path: BEGIN IMMEDIATE and 6, its
claim and its answer's record apart).

Both write a success only. A refusal (a `DomainError` out of `apply_account`) or a key that
exists (`KeyExists`) rolls the list back, and the caller runs the reference path, which
decides, records and answers, as it always has.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.ledger import repository
from paycore.ledger.postings import apply_account
from paycore.ledger.transfer_plan import Plan


class KeyExists(Exception):
    """The key was claimed before: roll back what the list wrote, and let the reference path
    replay it (or refuse a reused key)."""


# ------------------------------------------------------------------ PostgreSQL: one call


def call_params(plan: Plan) -> list[Any]:
    """`paycore_create_transfer`'s parameters (migration 0009's order)."""
    scope, values = plan.scope, plan.transfer_row
    assert values["created_at_us"] == scope.now_us and values["idempotency_key"] == scope.key
    return [
        scope.tenant_id,
        scope.key,
        scope.request_fingerprint,
        scope.expires_at_us,
        values["id"],
        values["kind"],
        values["batch_id"],
        values["reference_type"],
        values["reference_id"],
        values["metadata"],
        values["expires_at_us"],
        scope.now_us,
        *move_arrays(plan),
        plan.answer_status,
        list(plan.answer_parts),
    ]


def move_arrays(plan: Plan) -> list[list[Any]]:
    """The plan's accounts' moves (7 arrays, in account id order) and its entries (6, in entry
    order), as `paycore_create_transfer` (0009) and `paycore_ledger_move` (0055) take them."""
    moves, entry_rows = plan.moves, plan.entry_rows
    position = {move.account_id: index + 1 for index, move in enumerate(moves)}
    return [
        [move.account_id for move in moves],
        [move.delta.debits_posted_minor for move in moves],
        [move.delta.credits_posted_minor for move in moves],
        [move.delta.debits_pending_minor for move in moves],
        [move.delta.credits_pending_minor for move in moves],
        [move.entries_added for move in moves],
        [move.normal_balance if move.guarded else None for move in moves],
        [row["id"] for row in entry_rows],
        [row["account_id"] for row in entry_rows],
        [row["direction"] for row in entry_rows],
        [row["amount_minor"] for row in entry_rows],
        [row["currency"] for row in entry_rows],
        [position[row["account_id"]] for row in entry_rows],
    ]


def create_call(connection: Connection, plan: Plan) -> idempotency.Outcome | None:
    """Write the transfer in one call: its answer once committed, None (nothing written) if
    the key exists. A refusal comes out as DBAPIError with a SQLSTATE (migrations 0009, 0010,
    0024), having written nothing."""
    sequences = repository.create_transfer_call(connection, call_params(plan))
    return None if sequences is None else plan.answer(sequences)


async def create_call_on_loop(database: Database, plan: Plan) -> idempotency.Outcome | None:
    """`create_call` from the event loop, on a connection of the loop's (`db/loop_calls.py`, no
    worker thread): the same call, its errors the same `DBAPIError`s; a connection lost during
    it is `CommitOutcomeUnknown`, as `Database.autocommit()` answers it on a thread."""
    rows = await loop_calls.fetch(database, repository.CREATE_TRANSFER_CALL, call_params(plan), commits=True)
    sequences = repository.transfer_sequences(rows)
    return None if sequences is None else plan.answer(sequences)


# ------------------------------------------------------------------ SQLite: the fixed list


def write_statements(connection: Connection, plan: Plan) -> idempotency.Outcome:
    """Write the transfer with the fixed list, inside the caller's transaction: its answer.
    Raises `KeyExists` or the refusal of `apply_account` having written what the caller's
    rollback undoes."""
    scope = plan.scope
    counts = {
        move.account_id: apply_account(
            connection,
            scope.tenant_id,
            move.account_id,
            move.delta,
            move.entries_added,
            normal_balance=move.normal_balance,
            guarded=move.guarded,
            prefix="",
        )
        for move in plan.moves  # in id order, as every transfer takes them
    }
    sequences = plan.sequences(counts)
    outcome = plan.answer(sequences)
    if not idempotency.claim_answered(connection, scope, outcome):
        raise KeyExists(scope.key)  # before the transfer, which holds the key too (unique)
    repository.insert_transfer(connection, plan.transfer_row)
    repository.insert_entries(connection, plan.numbered_entries(sequences))
    return outcome
