"""The SQL of a payment's accept on the data plane (ADR 0026): the one call on PostgreSQL, the
fixed list of statements on SQLite. Each sends a `Plan` (`accept_plan.py`) as it is; no rules
here but the checks that need the rows: the destination exists and holds the payment's
currency, and the balance limits (the ledger's, `paycore.ledger.limits`, applied as
`paycore.ledger.postings._apply` applies them).

Both write a success only. Whatever would be refused (a destination missing or in another
currency, a limit, an account that is not what the plan says) leaves nothing written and says
so (`Refused`, or False for a key that exists), and the caller runs the reference path
(`service._start`), which decides, records and answers, as it always has.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.ledger import hold_repository
from paycore.ledger import service as ledger
from paycore.ledger.limits import TOTAL_MINOR_MAX, Totals, bound_before_adding, breaks_no_overdraft, grows_past
from paycore.payments.accept_plan import Plan, PlannedEntry


class Refused(Exception):
    """The write would be refused (or could not be made as planned): roll back, and let the
    reference path decide. `clearing_unknown`: the clearing account's cached id is not this
    database's (forget it), rather than a refusal of this request."""

    def __init__(self, message: str, *, clearing_unknown: bool = False) -> None:
        super().__init__(message)
        self.clearing_unknown = clearing_unknown


# ------------------------------------------------------------------ PostgreSQL: one call
# Migration 0036's signature (0027's and the capture method); in autocommit, the call commits
# itself (ADR 0011). Sent with `call_params` and read by `accepted`, on a worker thread's
# pooled connection (`accept_call`) or the event loop's (`accept.accept_on_loop`).
CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_payments_accept(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " ?, ?)"
    )
)

# What the function writes as constants: the plan must say the same (checked on every call).
_PAYMENT_CONSTANTS = {
    "failure_code": None,
    "processor_reference": None,
    "refunded_minor": 0,
    "disputed_minor": 0,  # its default (migration 0035)
    "attempts": 0,
    "claimed_by": None,
    "claimed_until_us": None,
    "in_doubt_since_us": None,
    "fault_code": None,
    "faulted_at_us": None,
    # An authorization's amounts and the operation in flight come later (the settle phase, a
    # capture or a cancel): the function leaves these to their defaults (migration 0033).
    "amount_capturable_minor": None,
    "amount_captured_minor": None,
    "authorization_expires_at_us": None,
    "cancellation_reason": None,
    "operation": None,
    "operation_idempotency_key": None,
    "capture_requested_minor": None,
}
_TRANSFER_CONSTANTS = {
    "kind": "pending",
    "pending_id": None,
    "reverses_id": None,
    "batch_id": None,
    "idempotency_key": None,
    "reference_type": "payment",
    "metadata": "{}",
    "expires_at_us": None,
}
_EVENT_CONSTANTS = {"kind": "state_change", "object_type": "payment", "from_state": None, "object_sequence": 1}


def accept_call(connection: Connection, plan: Plan) -> bool:
    """Write the accept in one call: True once committed, False (nothing written) if the key
    exists. A refusal comes out as DBAPIError with SQLSTATE PC001-PC003 or PC010 (migrations
    0027, 0036), having written nothing."""
    return accepted(driver.fetch(connection, CALL, call_params(plan)))


def accepted(rows: list[tuple[Any, ...]]) -> bool:
    """What the call's rows say: True once it committed the accept, False if the key exists."""
    assert len(rows) == 1, rows
    return bool(rows[0][0])


def call_params(plan: Plan) -> tuple[Any, ...]:
    payment, transfer, event = plan.payment_row, plan.transfer_row, plan.event_row
    assert {name: payment[name] for name in _PAYMENT_CONSTANTS} == _PAYMENT_CONSTANTS
    assert {name: transfer[name] for name in _TRANSFER_CONSTANTS} == _TRANSFER_CONSTANTS
    assert {name: event[name] for name in _EVENT_CONSTANTS} == _EVENT_CONSTANTS
    assert payment["processor_request_id"] == payment["id"] and payment["created_at_us"] == payment["updated_at_us"]
    assert plan.key_row["created_at_us"] == transfer["created_at_us"] == payment["created_at_us"]
    assert event["created_at_us"] == payment["created_at_us"]
    clearing = plan.clearing  # created by the function as a debit-normal system account, no flag
    assert (clearing.currency, clearing.normal_balance, clearing.no_overdraft) == (payment["currency"], "debit", False)
    return (
        plan.tenant_id,
        plan.key_row["key"],
        plan.key_row["fingerprint"],
        payment["created_at_us"],
        payment["id"],
        payment["transfer_id"],
        payment["currency"],
        payment["amount_minor"],
        payment["destination_account_id"],
        plan.clearing_entry.account_id,
        plan.clearing.code,
        [entry.id for entry in plan.entries],
        payment["source_type"],
        payment["source_token"],
        payment["description"],
        payment["metadata"],
        payment["status"],
        payment["next_attempt_at_us"],
        event["id"],
        event["type"],
        event["to_state"],
        event["cause"],
        event["actor"],
        event["data"],
        event["snapshot"],
        payment["capture_method"],
    )


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the key's claim, the two
# accounts' totals in id order (the destination's RETURNING proves it exists and says its
# currency), the transfer, its entries, the payment, its event: 7 statements (and BEGIN
# IMMEDIATE). Where this process has not seen the tenant's clearing account, the reference
# path's own `ledger.ensure_account` first (a read, and its creation where missing).
CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    ' expires_at_us) VALUES (?, ?, ?, NULL, NULL, ?, NULL) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
_PAYMENT_COLUMNS = (
    "tenant_id",
    "id",
    "idempotency_key",
    "amount_minor",
    "currency",
    "source_type",
    "source_token",
    "destination_account_id",
    "description",
    "metadata",
    "status",
    "failure_code",
    "processor_request_id",
    "processor_reference",
    "transfer_id",
    "refunded_minor",
    "attempts",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "in_doubt_since_us",
    "fault_code",
    "faulted_at_us",
    "created_at_us",
    "updated_at_us",
    "capture_method",
    "amount_capturable_minor",
    "amount_captured_minor",
    "authorization_expires_at_us",
    "cancellation_reason",
    "operation",
    "operation_idempotency_key",
    "capture_requested_minor",
    "disputed_minor",
)


_PAYMENT = driver.insert("payments", _PAYMENT_COLUMNS)
_EVENT = driver.insert("events", EVENT_COLUMNS)
_PAYMENT_NAMES = frozenset(_PAYMENT_COLUMNS)  # what the plan's rows must hold, checked on every write
_EVENT_NAMES = frozenset(EVENT_COLUMNS)


def write_statements(connection: Connection, plan: Plan) -> str | None:
    """Write the accept with the fixed list, inside the caller's transaction: the clearing
    account's id once written; None (nothing written) if the key exists. Raises `Refused`
    having written what the caller's rollback undoes."""
    key = plan.key_row
    claimed = driver.fetch(connection, CLAIM, (key["tenant_id"], key["key"], key["fingerprint"], key["created_at_us"]))
    if not claimed:
        return None
    clearing_id = plan.clearing_entry.account_id if plan.clearing_known else _ensure_clearing(connection, plan)
    destination_id = plan.destination_entry.account_id
    if clearing_id == destination_id:
        raise Refused("the destination is the processor clearing account itself")
    ids = {plan.clearing_entry.id: clearing_id, plan.destination_entry.id: destination_id}
    sequences = {}
    for entry in sorted(plan.entries, key=lambda entry: ids[entry.id]):  # id order, as every transfer
        sequences[entry.id] = _apply(connection, plan, entry, ids[entry.id])
    transfer = plan.transfer_row
    driver.execute(connection, hold_repository.TRANSFER, [transfer[name] for name in hold_repository.TRANSFER_COLUMNS])
    driver.execute(connection, hold_repository.ENTRY_PAIR, _entry_params(plan, ids, sequences))
    assert plan.payment_row.keys() == _PAYMENT_NAMES and plan.event_row.keys() == _EVENT_NAMES
    driver.execute(connection, _PAYMENT, [plan.payment_row[name] for name in _PAYMENT_COLUMNS])
    driver.execute(connection, _EVENT, [plan.event_row[name] for name in EVENT_COLUMNS])
    return clearing_id


def _ensure_clearing(connection: Connection, plan: Plan) -> str:
    """The clearing account's id, created where missing: the reference path's own function."""
    template = plan.clearing
    account = ledger.ensure_account(
        connection,
        plan.tenant_id,
        code=template.code,
        currency=template.currency,
        normal_balance=template.normal_balance,
        no_overdraft=template.no_overdraft,
        now_us=plan.payment.created_at_us,
    )
    return account.id


def _apply(connection: Connection, plan: Plan, entry: PlannedEntry, account_id: str) -> int:
    """The account's pending totals moved by its entry, checked as `postings._apply` checks
    them: the entry's sequence number. The destination's row proves it exists and holds the
    payment's currency; the clearing account's, that it is the one the plan names."""
    delta = entry.delta
    rows = driver.fetch(
        connection,
        hold_repository.APPLY_PENDING,
        (
            delta.debits_pending_minor,
            delta.credits_pending_minor,
            plan.tenant_id,
            account_id,
            bound_before_adding(delta.debits_pending_minor, TOTAL_MINOR_MAX),
            bound_before_adding(delta.credits_pending_minor, TOTAL_MINOR_MAX),
        ),
    )
    clearing, template = entry is plan.clearing_entry, plan.clearing
    if not rows:
        raise Refused(f"{account_id}: missing, or past the range of a total", clearing_unknown=clearing)
    code, currency, normal_balance, no_overdraft, system, *figures, entries_count = rows[0]
    if clearing and (code, currency, normal_balance, bool(system)) != (template.code, template.currency, "debit", True):
        raise Refused(f"{account_id} is not the processor clearing account the plan expects", clearing_unknown=True)
    if currency != plan.payment.currency:
        raise Refused(f"{account_id} holds {currency}, the payment is in {plan.payment.currency}")
    after = Totals(*figures)
    before = Totals(
        after.debits_posted_minor,
        after.credits_posted_minor,
        after.debits_pending_minor - delta.debits_pending_minor,
        after.credits_pending_minor - delta.credits_pending_minor,
    )
    if grows_past(before, after, normal_balance) is not None:
        raise Refused(f"{account_id} would pass the balance limit")
    if no_overdraft and breaks_no_overdraft(after, normal_balance):
        raise Refused(f"{account_id} would be overdrawn")
    return int(entries_count)


def _entry_params(plan: Plan, ids: dict[str, str], sequences: dict[str, int]) -> list[Any]:
    payment = plan.payment
    params: list[Any] = []
    for entry in plan.entries:
        params += [
            payment.tenant_id,
            entry.id,
            payment.transfer_id,
            ids[entry.id],
            entry.direction,
            entry.amount_minor,
            payment.currency,
            sequences[entry.id],
            payment.created_at_us,
        ]
    return params
