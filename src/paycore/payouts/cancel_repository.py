"""The SQL of a payout's cancel on the data plane (ADR 0026): the one call on PostgreSQL, the
fixed list of statements on SQLite. Each sends a `Plan` (`cancel_plan.py`) as it is; the only
check here is the one that needs the row: the payout is still what the plan was made from (its
compare-and-set), and its hold's two entries name the accounts whose pending totals the void
releases.

Both write a success only. A key that exists, or a payout that moved since it was read (a
worker's claim won the race), leaves nothing written and says so (False, or `Moved`); the
caller then runs the reference path, which replays the key or answers the 409 with the current
status, as it always has.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.db import driver
from paycore.payouts.cancel_plan import Plan


class Moved(Exception):
    """The payout is no longer what the plan was made from (or its hold is not as planned):
    roll back, and let the reference path decide."""


# The columns a cancel's move writes (`Machine.changes` for a payout into `canceled`): the plan
# must say the same (checked on every write).
_CHANGED = (
    "status",
    "updated_at_us",
    "fault_code",
    "faulted_at_us",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "in_doubt_since_us",
)
_CLEARED = {name: None for name in _CHANGED[2:]}


def _check(plan: Plan) -> None:
    assert plan.changes.keys() == set(_CHANGED), sorted(plan.changes)
    assert {name: plan.changes[name] for name in _CLEARED} == _CLEARED
    assert plan.changes["updated_at_us"] == plan.now_us


# ------------------------------------------------------------------ PostgreSQL: one call
# Migration `*_payouts_cancel.py` (its number: the migration file and HEAD_REVISION); in
# autocommit, the call commits itself (ADR 0011).
CALL = driver.statement(
    "SELECT paycore_payouts_cancel(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def cancel_call(connection: Connection, plan: Plan) -> bool:
    """Cancel the payout in one call: True once committed, False (nothing written) if the key
    exists. A payout that moved comes out as DBAPIError with SQLSTATE PC012 (migration
    `*_payouts_cancel.py`), having written nothing."""
    return canceled(driver.fetch(connection, CALL, call_params(plan)))


def canceled(rows: list[tuple[Any, ...]]) -> bool:
    """The call's answer read from its rows (on a worker thread's connection or the loop's):
    True once committed, False (nothing written) if the key exists."""
    return bool(rows[0][0])


def call_params(plan: Plan) -> tuple[Any, ...]:
    _check(plan)
    key, before, payout, event = plan.key_row, plan.before, plan.payout, plan.event_row
    assert key["created_at_us"] <= plan.now_us
    return (
        plan.tenant_id,
        key["key"],
        key["fingerprint"],
        key["created_at_us"],
        key["expires_at_us"],
        plan.answer.status,
        plan.answer.body,
        payout.id,
        before.status,
        before.updated_at_us,
        before.attempts,
        payout.status,
        plan.now_us,
        payout.transfer_id,
        payout.amount_minor,
        plan.void_row["id"],
        event["id"],
        event["type"],
        event["from_state"],
        event["to_state"],
        event["cause"],
        event["actor"],
        event["data"],
        event["snapshot"],
    )


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the key's claim with its answer,
# the payout's compare-and-set (RETURNING what the void needs, checked against the plan), the
# void, the hold's two accounts' pending totals released (each found by its entry of the hold,
# as `ledger.settle_pending` finds them; no entry is written by a void), the state event: 6
# statements (and BEGIN IMMEDIATE).
_CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    ' expires_at_us) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
_CAS = driver.statement(
    "UPDATE payouts SET "
    + ", ".join(f"{name} = ?" for name in _CHANGED)
    + " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND attempts = ?"
    " RETURNING amount_minor, currency, source_account_id, transfer_id"
)
_TRANSFER_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "pending_id",
    "reverses_id",
    "batch_id",
    "idempotency_key",
    "reference_type",
    "reference_id",
    "owner_id",
    "metadata",
    "expires_at_us",
    "created_at_us",
)
_VOID = driver.statement(
    f"INSERT INTO ledger_transfers ({', '.join(_TRANSFER_COLUMNS)}) VALUES ({', '.join('?' * len(_TRANSFER_COLUMNS))})"
)
_RELEASE = driver.statement(
    "UPDATE ledger_accounts SET debits_pending_minor = debits_pending_minor - ?,"
    " credits_pending_minor = credits_pending_minor - ?"
    " WHERE tenant_id = ? AND id = (SELECT account_id FROM ledger_entries"
    " WHERE tenant_id = ? AND transfer_id = ? AND direction = ? AND amount_minor = ?)"
    " AND debits_pending_minor >= ? AND credits_pending_minor >= ?"
    " RETURNING id"
)
_EVENT_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "type",
    "object_type",
    "object_id",
    "from_state",
    "to_state",
    "cause",
    "actor",
    "data",
    "snapshot",
    "created_at_us",
)
# Numbered after the payout's last published event in its own INSERT, as `audit.write` does.
_EVENT = driver.statement(
    f"INSERT INTO events ({', '.join(_EVENT_COLUMNS)}, object_sequence)"
    f" VALUES ({', '.join('?' * len(_EVENT_COLUMNS))},"
    " (SELECT COALESCE(MAX(object_sequence), 0) + 1 FROM events WHERE tenant_id = ? AND object_id = ?))"
)


def write_statements(connection: Connection, plan: Plan) -> bool:
    """Cancel the payout with the fixed list, inside the caller's transaction: True once
    written; False (nothing written) if the key exists. Raises `Moved` having written what the
    caller's rollback undoes."""
    _check(plan)
    key, answer, payout, before = plan.key_row, plan.answer, plan.payout, plan.before
    claim = (*(key[name] for name in ("tenant_id", "key", "fingerprint")), answer.status, answer.body)
    if not driver.fetch(connection, _CLAIM, (*claim, key["created_at_us"], key["expires_at_us"])):
        return False
    changed = [plan.changes[name] for name in _CHANGED]
    where = (plan.tenant_id, payout.id, before.status, before.updated_at_us, before.attempts)
    rows = driver.fetch(connection, _CAS, (*changed, *where))
    if not rows:
        raise Moved(f"payout {payout.id} moved since it was read")
    facts = (payout.amount_minor, payout.currency, payout.source_account_id, payout.transfer_id)
    assert tuple(rows[0]) == facts, "the payout's hold is as read: only its status and times change"
    driver.execute(connection, _VOID, [plan.void_row[name] for name in _TRANSFER_COLUMNS])
    released = [_release(connection, plan, direction) for direction in ("debit", "credit")]
    if released[0] != payout.source_account_id or released[1] is None:
        raise Moved(f"the hold {payout.transfer_id} is not on the accounts the plan expects")
    event = plan.event_row
    assert event.keys() == set(_EVENT_COLUMNS)
    driver.execute(connection, _EVENT, [*(event[name] for name in _EVENT_COLUMNS), plan.tenant_id, payout.id])
    return True


def _release(connection: Connection, plan: Plan, direction: str) -> str | None:
    """The hold's entry of `direction` released from its account's pending total: its account."""
    payout, amount_minor = plan.payout, plan.payout.amount_minor
    debit = amount_minor if direction == "debit" else 0
    credit = amount_minor - debit
    rows = driver.fetch(
        connection,
        _RELEASE,
        (debit, credit, payout.tenant_id, payout.tenant_id, payout.transfer_id, direction, amount_minor, debit, credit),
    )
    return str(rows[0][0]) if rows else None
