"""The SQL of a refund's creating phase on the data plane (ADR 0026): the one call on
PostgreSQL, the fixed list of statements on SQLite. Each sends a `Plan` (`create_plan.py`) as it
is; no rules here but the checks that need the rows: the ceiling's (`ceiling.reserve`'s
conditions), four eyes by sum (a copy of `create_plan.needs_approval`, a condition of the same
UPDATE, with the tenant's threshold read by that statement), the payment is the one the plan
names, and the balance limits (the ledger's, `paycore.ledger.limits`, applied as
`paycore.ledger.postings._apply` applies them).

Both write a success only. Whatever would be refused or is not a plain `pending` refund (no
such payment, not succeeded, over the ceiling, past the approval threshold, a limit, an account
that is not what the plan says) leaves nothing written and says so (`Refused`, or False for a
key that exists), and the caller runs the reference path (`service.create_refund` inside
`idempotency.run`), which decides, records and answers, as it always has.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.ledger import hold_repository
from paycore.ledger.limits import TOTAL_MINOR_MAX, Totals, bound_before_adding, breaks_no_overdraft, grows_past
from paycore.refunds import ceiling
from paycore.refunds.create_plan import Plan, PlannedEntry


class Refused(Exception):
    """The write would be refused, or is not this phase's (roll back, and let the reference
    path decide). `stale`: a cached fact the plan used (the payment's, the clearing account's
    id) is not this database's (forget them), rather than a refusal of this request."""

    def __init__(self, plan: Plan, message: str, *, stale: bool = False) -> None:
        super().__init__(message)
        self.plan, self.stale = plan, stale


# ------------------------------------------------------------------ PostgreSQL: one call
# `paycore_refunds_create` (its migration); in autocommit, the call commits itself (ADR 0011).
# Sent from a worker thread's connection (`create_call`) or the event loop's (`create.py`'s
# `write_on_loop`, `db/loop_calls.py`).
CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_refunds_create(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?, ?, ?, ?, ?, ?, ?, ?)"
    )
)

# What the function writes as constants: the plan must say the same (checked on every call).
_REFUND_CONSTANTS = {
    "status": "pending",
    "failure_code": None,
    "processor_reference": None,
    "attempts": 0,
    "claimed_by": None,
    "claimed_until_us": None,
    "in_doubt_since_us": None,
    "fault_code": None,
    "faulted_at_us": None,
}
_TRANSFER_CONSTANTS = {
    "kind": "pending",
    "pending_id": None,
    "reverses_id": None,
    "batch_id": None,
    "idempotency_key": None,
    "reference_type": "refund",
    "metadata": "{}",
    "expires_at_us": None,
}
_EVENT_CONSTANTS = {"kind": "state_change", "object_type": "refund", "from_state": None, "object_sequence": 1}


def create_call(connection: Connection, plan: Plan) -> bool:
    """Write the refund in one call: True once committed, False (nothing written) if the key
    exists. A refusal comes out as DBAPIError with SQLSTATE PC011 or PC001-PC003, having
    written nothing."""
    return created(driver.fetch(connection, CALL, call_params(plan)))


def created(rows: list[tuple[Any, ...]]) -> bool:
    """What the call's rows say: True once it committed the refund, False if the key exists."""
    assert len(rows) == 1, rows
    return bool(rows[0][0])


def call_params(plan: Plan) -> tuple[Any, ...]:
    refund, transfer, event, key = plan.refund_row, plan.transfer_row, plan.event_row, plan.key_row
    assert {name: refund[name] for name in _REFUND_CONSTANTS} == _REFUND_CONSTANTS
    assert {name: transfer[name] for name in _TRANSFER_CONSTANTS} == _TRANSFER_CONSTANTS
    assert {name: event[name] for name in _EVENT_CONSTANTS} == _EVENT_CONSTANTS
    assert refund["processor_request_id"] == refund["id"] and refund["idempotency_key"] == key["key"]
    assert key["created_at_us"] == transfer["created_at_us"] == refund["created_at_us"] == event["created_at_us"]
    assert refund["next_attempt_at_us"] == refund["updated_at_us"] == refund["created_at_us"]
    assert key["expires_at_us"] is None
    return (
        plan.tenant_id,
        key["key"],
        key["fingerprint"],
        refund["created_at_us"],
        key["response_status"],
        key["response_body"],
        refund["id"],
        refund["payment_id"],
        ceiling.REFUNDABLE_STATUS,
        refund["currency"],
        refund["amount_minor"],
        plan.destination_entry.account_id,
        plan.clearing_code,
        refund["transfer_id"],
        [entry.id for entry in plan.entries],
        refund["reason"],
        event["id"],
        event["type"],
        event["to_state"],
        event["cause"],
        event["actor"],
        event["data"],
        event["snapshot"],
    )


# The payment's facts the planner needs (`create.py`), read where this process has not seen the
# payment: on PostgreSQL before the call, on the same connection (a worker thread's) or from the
# event loop; on SQLite inside the write's transaction. Never written: no lock.
PAYMENT_FACTS = driver.statement(
    "SELECT status, capture_method, currency, destination_account_id FROM payments WHERE tenant_id = ? AND id = ?"
)


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the key's claim with its answer,
# the ceiling's reservation (with the tenant's threshold read by the same statement), the two
# accounts' pending totals in id order, the transfer, its entries, the refund, its event: 8
# statements (and BEGIN IMMEDIATE). The clearing account's id is the planner's (cached, or read
# before the write by `create.py`).
_CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    ' expires_at_us) VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
# `ceiling.reserve`'s conditions, and `create_plan.needs_approval`'s copy (the sum within the
# tenant's threshold, where it has one).
_RESERVE = driver.statement(
    "UPDATE payments SET refunded_minor = refunded_minor + ?"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND refunded_minor + disputed_minor + ? <= amount_minor"
    " AND refunded_minor + ? <= coalesce((SELECT s.refund_approval_threshold_minor FROM tenant_settings s"
    " WHERE s.tenant_id = ?), ?)"
    " RETURNING currency, destination_account_id"
)
_REFUND_COLUMNS = (
    "tenant_id",
    "id",
    "payment_id",
    "idempotency_key",
    "amount_minor",
    "currency",
    "reason",
    "status",
    "failure_code",
    "processor_request_id",
    "processor_reference",
    "transfer_id",
    "attempts",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "in_doubt_since_us",
    "fault_code",
    "faulted_at_us",
    "created_at_us",
    "updated_at_us",
)


_REFUND = driver.insert("refunds", _REFUND_COLUMNS)
_EVENT = driver.insert("events", EVENT_COLUMNS)


def write_statements(connection: Connection, plan: Plan) -> bool:
    """Write the refund with the fixed list, inside the caller's transaction: True once
    written; False (nothing written) if the key exists. Raises `Refused` having written what
    the caller's rollback undoes."""
    key = plan.key_row
    claimed = driver.fetch(
        connection,
        _CLAIM,
        (
            key["tenant_id"],
            key["key"],
            key["fingerprint"],
            key["response_status"],
            key["response_body"],
            key["created_at_us"],
        ),
    )
    if not claimed:
        return False
    _reserve(connection, plan)
    ids = {entry.id: entry.account_id for entry in plan.entries}
    sequences = {}
    for entry in sorted(plan.entries, key=lambda entry: entry.account_id):  # id order, as every transfer
        sequences[entry.id] = _apply(connection, plan, entry)
    transfer = plan.transfer_row
    driver.execute(connection, hold_repository.TRANSFER, [transfer[name] for name in hold_repository.TRANSFER_COLUMNS])
    driver.execute(connection, hold_repository.ENTRY_PAIR, _entry_params(plan, ids, sequences))
    assert plan.refund_row.keys() == set(_REFUND_COLUMNS) and plan.event_row.keys() == set(EVENT_COLUMNS)
    driver.execute(connection, _REFUND, [plan.refund_row[name] for name in _REFUND_COLUMNS])
    driver.execute(connection, _EVENT, [plan.event_row[name] for name in EVENT_COLUMNS])
    return True


def _reserve(connection: Connection, plan: Plan) -> None:
    """The ceiling's reservation, within the tenant's approval threshold: refused (for the
    reference path to answer) where the payment is missing, not succeeded, has no room for the
    amount, would need approval, or is not the payment the plan was made for."""
    refund, amount_minor = plan.refund, plan.refund.amount_minor
    rows = driver.fetch(
        connection,
        _RESERVE,
        (
            amount_minor,
            refund.tenant_id,
            refund.payment_id,
            ceiling.REFUNDABLE_STATUS,
            amount_minor,
            amount_minor,
            refund.tenant_id,
            TOTAL_MINOR_MAX,  # no threshold: no bound but the column's
        ),
    )
    if not rows:
        raise Refused(plan, f"payment {refund.payment_id}: not refundable here (status, ceiling or approval)")
    if tuple(rows[0]) != (refund.currency, plan.destination_entry.account_id):
        raise Refused(plan, f"payment {refund.payment_id} is not the one the plan expects", stale=True)


def _apply(connection: Connection, plan: Plan, entry: PlannedEntry) -> int:
    """The account's pending totals moved by its entry, checked as `postings._apply` checks
    them: the entry's sequence number. The clearing account's row proves it is the one the plan
    names; the destination's, that it still holds the refund's currency."""
    delta = entry.delta
    rows = driver.fetch(
        connection,
        hold_repository.APPLY_PENDING,
        (
            delta.debits_pending_minor,
            delta.credits_pending_minor,
            plan.tenant_id,
            entry.account_id,
            bound_before_adding(delta.debits_pending_minor, TOTAL_MINOR_MAX),
            bound_before_adding(delta.credits_pending_minor, TOTAL_MINOR_MAX),
        ),
    )
    clearing = entry is plan.clearing_entry
    if not rows:
        raise Refused(plan, f"{entry.account_id}: missing, or past the range of a total", stale=clearing)
    code, currency, normal_balance, no_overdraft, system, *figures, entries_count = rows[0]
    if clearing and (code, currency, normal_balance, bool(system)) != (
        plan.clearing_code,
        plan.refund.currency,
        "debit",
        True,
    ):
        raise Refused(plan, f"{entry.account_id} is not the clearing account the plan expects", stale=True)
    if currency != plan.refund.currency or (not clearing and code == plan.clearing_code):
        raise Refused(plan, f"{entry.account_id} is not an account this refund can hold on")
    after = Totals(*figures)
    before = Totals(
        after.debits_posted_minor,
        after.credits_posted_minor,
        after.debits_pending_minor - delta.debits_pending_minor,
        after.credits_pending_minor - delta.credits_pending_minor,
    )
    if grows_past(before, after, normal_balance) is not None:
        raise Refused(plan, f"{entry.account_id} would pass the balance limit")
    if no_overdraft and breaks_no_overdraft(after, normal_balance):
        raise Refused(plan, f"{entry.account_id} would be overdrawn")
    return int(entries_count)


def _entry_params(plan: Plan, ids: dict[str, str], sequences: dict[str, int]) -> list[Any]:
    refund = plan.refund
    params: list[Any] = []
    for entry in plan.entries:
        params += [
            refund.tenant_id,
            entry.id,
            refund.transfer_id,
            ids[entry.id],
            entry.direction,
            entry.amount_minor,
            refund.currency,
            sequences[entry.id],
            refund.created_at_us,
        ]
    return params
