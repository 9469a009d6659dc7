"""The SQL of a payout's creating phase on the data plane (ADR 0026): the one call on
PostgreSQL, the fixed list of statements on SQLite. Each sends a `Plan` (`create_plan.py`) as
it is; no rules here but the checks that need the rows: the source exists, is not a system
account and holds the payout's currency; the source's available balance stays >= 0 (the
hold's guard, checked under the row lock its UPDATE takes, as `paycore.ledger.postings._apply`
checks `guard_available`), and the balance limits (`paycore.ledger.limits`).

Both write a success only. Whatever would be refused (a source missing, in another currency or
short of funds, a limit, an in-transit account that is not what the plan says) leaves nothing
written and says so (`Refused`, or False for a key that exists), and the caller runs the
reference path, which decides, records and answers, as it always has. No account number or
IBAN is in any message here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.ledger import hold_repository
from paycore.ledger.limits import TOTAL_MINOR_MAX, Totals, bound_before_adding, breaks_no_overdraft, grows_past
from paycore.payouts import money
from paycore.payouts.create_plan import Plan, PlannedEntry


class Refused(Exception):
    """The write would be refused (or could not be made as planned): roll back, and let the
    reference path decide. `in_transit_unknown`: the in-transit account's cached id is not
    this database's (forget it), rather than a refusal of this request."""

    def __init__(self, message: str, *, in_transit_unknown: bool = False) -> None:
        super().__init__(message)
        self.in_transit_unknown = in_transit_unknown


# ------------------------------------------------------------------ PostgreSQL: one call
# Migration `*_payouts_create.py` (its number: the migration file and HEAD_REVISION); in autocommit, the call
# commits itself (ADR 0011).
CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_payouts_create(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[], ?::text[], ?,"
        " ?::text[], ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[], ?::text[], ?::text[], ?)"
    )
)

# What the function writes as constants: the plan must say the same (checked on every call).
_PAYOUT_CONSTANTS = {
    "status": "scheduled",
    "failure_code": None,
    "return_code": None,
    "bank_reference": None,
    "batch_id": None,
    "attempts": 0,
    "next_attempt_at_us": None,
    "claimed_by": None,
    "claimed_until_us": None,
    "in_doubt_since_us": None,
    "fault_code": None,
    "faulted_at_us": None,
    "sent_at_us": None,
    "settled_at_us": None,
    "returned_at_us": None,
}
_TRANSFER_CONSTANTS = {
    "kind": "pending",
    "pending_id": None,
    "reverses_id": None,
    "batch_id": None,
    "idempotency_key": None,
    "reference_type": "payout",
    "metadata": "{}",
    "expires_at_us": None,
}
_BIRTH_CONSTANTS = {"kind": "state_change", "object_type": "payout", "from_state": None, "object_sequence": 1}
_API_CALL_CONSTANTS = {"kind": "api_call", "object_type": "payout", "from_state": None, "to_state": None}


def create_call(connection: Connection, plan: Plan) -> bool:
    """Write the payout in one call: True once committed, False (nothing written) if the key
    exists. A refusal comes out as DBAPIError with SQLSTATE PC001-PC003 or PC010 (migration
    `*_payouts_create.py`), having written nothing."""
    return created(driver.fetch(connection, CALL, call_params(plan)))


def created(rows: list[tuple[Any, ...]]) -> bool:
    """The call's answer read from its rows (on a worker thread's connection or the loop's):
    True once committed, False (nothing written) if the key exists."""
    return bool(rows[0][0])


def call_params(plan: Plan) -> tuple[Any, ...]:
    payout, transfer, (birth, api_call) = plan.payout_row, plan.transfer_row, plan.event_rows
    assert {name: payout[name] for name in _PAYOUT_CONSTANTS} == _PAYOUT_CONSTANTS
    assert {name: transfer[name] for name in _TRANSFER_CONSTANTS} == _TRANSFER_CONSTANTS
    assert {name: birth[name] for name in _BIRTH_CONSTANTS} == _BIRTH_CONSTANTS
    assert {name: api_call[name] for name in _API_CALL_CONSTANTS} == _API_CALL_CONSTANTS
    assert birth["actor"] == api_call["actor"] and payout["idempotency_key"] == plan.key_row["key"]
    now_us = payout["created_at_us"]
    assert plan.key_row["created_at_us"] == transfer["created_at_us"] == payout["updated_at_us"] == now_us
    assert birth["created_at_us"] == api_call["created_at_us"] == now_us
    # created by the function as system accounts with no flag, as `ledger.ensure_accounts` does
    assert list(plan.accounts) == money.templates(payout["currency"])
    assert not any(template.no_overdraft for template in plan.accounts)
    return (
        plan.tenant_id,
        plan.key_row["key"],
        plan.key_row["fingerprint"],
        now_us,
        plan.answer.status,
        plan.answer.body,
        payout["id"],
        payout["transfer_id"],
        payout["currency"],
        payout["amount_minor"],
        payout["source_account_id"],
        list(plan.account_ids),
        [template.code for template in plan.accounts],
        [template.normal_balance for template in plan.accounts],
        plan.in_transit.code,
        [entry.id for entry in plan.entries],
        payout["rail"],
        payout["beneficiary_name"],
        payout["iban"],
        payout["bic"],
        payout["routing_number"],
        payout["account_number"],
        payout["execute_on"],
        payout["metadata"],
        birth["actor"],
        birth["to_state"],
        [birth["id"], api_call["id"]],
        [birth["type"], api_call["type"]],
        [birth["data"], api_call["data"]],
        [birth["cause"], api_call["cause"]],
        birth["snapshot"],
    )


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the key's claim with its answer,
# the two accounts' totals in id order (the source's RETURNING proves it exists and says its
# currency and totals), the transfer, its entries, the payout, its two events: 7 statements
# (and BEGIN IMMEDIATE). Where this process has not seen the tenant's in-transit account, the
# reference path's own `money.accounts` first (a read, and the creation of what is missing).
_CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    ' expires_at_us) VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
_PAYOUT_COLUMNS = (
    "tenant_id",
    "id",
    "idempotency_key",
    "amount_minor",
    "currency",
    "rail",
    "source_account_id",
    "beneficiary_name",
    "iban",
    "bic",
    "routing_number",
    "account_number",
    "execute_on",
    "metadata",
    "status",
    "failure_code",
    "return_code",
    "transfer_id",
    "bank_reference",
    "batch_id",
    "attempts",
    "next_attempt_at_us",
    "claimed_by",
    "claimed_until_us",
    "in_doubt_since_us",
    "fault_code",
    "faulted_at_us",
    "sent_at_us",
    "settled_at_us",
    "returned_at_us",
    "created_at_us",
    "updated_at_us",
)


_PAYOUT = driver.insert("payouts", _PAYOUT_COLUMNS)
_EVENTS = driver.insert("events", EVENT_COLUMNS, rows=2)  # the birth, then the api_call


def write_statements(connection: Connection, plan: Plan) -> str | None:
    """Write the payout with the fixed list, inside the caller's transaction: the in-transit
    account's id once written; None (nothing written) if the key exists. Raises `Refused`
    having written what the caller's rollback undoes."""
    key = plan.key_row
    answer = plan.answer
    claim = (key["tenant_id"], key["key"], key["fingerprint"], answer.status, answer.body, key["created_at_us"])
    if not driver.fetch(connection, _CLAIM, claim):
        return None
    in_transit_id = plan.in_transit_entry.account_id if plan.in_transit_known else _ensure_accounts(connection, plan)
    source_id = plan.source_entry.account_id
    if in_transit_id == source_id:
        raise Refused("the source is the in-transit account itself")
    ids = {plan.source_entry.id: source_id, plan.in_transit_entry.id: in_transit_id}
    sequences = {}
    for entry in sorted(plan.entries, key=lambda entry: ids[entry.id]):  # id order, as every transfer
        sequences[entry.id] = _apply(connection, plan, entry, ids[entry.id])
    transfer = plan.transfer_row
    driver.execute(connection, hold_repository.TRANSFER, [transfer[name] for name in hold_repository.TRANSFER_COLUMNS])
    driver.execute(connection, hold_repository.ENTRY_PAIR, _entry_params(plan, ids, sequences))
    assert plan.payout_row.keys() == set(_PAYOUT_COLUMNS)
    driver.execute(connection, _PAYOUT, [plan.payout_row[name] for name in _PAYOUT_COLUMNS])
    assert all(row.keys() <= set(EVENT_COLUMNS) for row in plan.event_rows)
    driver.execute(connection, _EVENTS, [row.get(name) for row in plan.event_rows for name in EVENT_COLUMNS])
    return in_transit_id


def _ensure_accounts(connection: Connection, plan: Plan) -> str:
    """The in-transit account's id, the four payout accounts created where missing: the
    reference path's own function."""
    payout = plan.payout
    return money.accounts(connection, payout.tenant_id, payout.currency, now_us=payout.created_at_us)[money.IN_TRANSIT]


def _apply(connection: Connection, plan: Plan, entry: PlannedEntry, account_id: str) -> int:
    """The account's pending totals moved by its entry, checked as `postings._apply` checks
    them (the source guarded): the entry's sequence number. The source's row proves it exists,
    is the tenant's own and holds the payout's currency; in transit's, that it is the one the
    plan names."""
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
    in_transit, template, source = entry is plan.in_transit_entry, plan.in_transit, entry is plan.source_entry
    if not rows:
        raise Refused(f"{account_id}: missing, or past the range of a total", in_transit_unknown=in_transit)
    code, currency, normal_balance, no_overdraft, system, *figures, entries_count = rows[0]
    expected = (template.code, template.currency, "credit", True)
    if in_transit and (code, currency, normal_balance, bool(system)) != expected:
        raise Refused(f"{account_id} is not the in-transit account the plan expects", in_transit_unknown=True)
    if source and (currency != plan.payout.currency or bool(system)):
        raise Refused(f"{account_id} holds {currency} or is a system account; the payout is in {plan.payout.currency}")
    after = Totals(*figures)
    before = Totals(
        after.debits_posted_minor,
        after.credits_posted_minor,
        after.debits_pending_minor - delta.debits_pending_minor,
        after.credits_pending_minor - delta.credits_pending_minor,
    )
    if grows_past(before, after, normal_balance) is not None:
        raise Refused(f"{account_id} would pass the balance limit")
    if (no_overdraft or source) and breaks_no_overdraft(after, normal_balance):
        raise Refused(f"{account_id} has insufficient available funds")
    return int(entries_count)


def _entry_params(plan: Plan, ids: dict[str, str], sequences: dict[str, int]) -> list[Any]:
    payout = plan.payout
    params: list[Any] = []
    for entry in plan.entries:
        params += [
            payout.tenant_id,
            entry.id,
            payout.transfer_id,
            ids[entry.id],
            entry.direction,
            entry.amount_minor,
            payout.currency,
            sequences[entry.id],
            payout.created_at_us,
        ]
    return params
