"""The SQL of a webhook that moves a payment, settles a refund or moves a payout, on the data
plane (ADR 0026 step 3): the one call on PostgreSQL, the fixed list of statements on SQLite. Each
sends a plan (`apply_object_plan.py`) as it is. What differs per object is data, a `Writing`
(`apply_payment.py`, `apply_refund.py`, `apply_payout.py`): its move's statements and rules are
its settle's (`payments.settle_repository.write_move` / `paycore_payments_settle`,
`refunds.settle_repository.write_move` / `paycore_refunds_settle`,
`payouts.settle_repository.write_move` / `paycore_payouts_settle`), no copy of them here; its
calls (`paycore_inbound_apply_payment` of migration `*_inbound_apply_payment.py`,
`paycore_inbound_apply_refund` and `_confirm_refund` of `*_inbound_refunds.py`,
`paycore_inbound_apply_payout` and `_confirm_payout` of `*_inbound_payouts.py`) and their
arguments. A payment's creating request must have answered before its webhook moves it
(`Writing.answered_key`: else the reference path writes the answer with the move, as
`payments.lifecycle.apply_evidence` does).

The reference path's order: the event stored first (its primary key decides a redelivery,
`duplicate`, writing nothing), then the object's compare-and-set (its row lock), the hold, the
state event, then the audit event. An object moved first, a payment's answer not yet recorded
or a refused write leave nothing written (`Unplain` or `Refused`, rolled back; PostgreSQL's
SQLSTATE PC013 and PC001-PC004, PC009), and the reference path decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS, state_event_args
from paycore.db import driver
from paycore.inbound.apply_object_plan import APPLIED, Confirmation, Moved, Plan
from paycore.inbound.receive_plan import STALE, WEBHOOK_COLUMNS
from paycore.inbound.receive_repository import DUPLICATE, Unplain
from paycore.ledger import hold_repository

Accounts = list[SimpleNamespace]
Refused = hold_repository.Refused  # each settle's `settle_repository.Refused`: roll back, the reference path decides

M = TypeVar("M", bound=Moved)


@dataclass(frozen=True)
class Writing(Generic[M]):
    """What differs between the objects a webhook moves, in SQL: the data of the one shape."""

    write_move: Callable[[Connection, M], Accounts | None]  # SQLite: the settle's list, None when moved first
    # PostgreSQL: the apply phase's function, or the function for a plan (a payout's settlement: one
    # step or two), and its arguments.
    apply_call: driver.Statement | Callable[[Plan[M]], driver.Statement]
    apply_params: Callable[[Plan[M]], Sequence[Any]]
    # PostgreSQL: the plain case's function and its arguments; None where there is no plain case.
    confirm_call: driver.Statement | None = None
    confirm_params: Callable[[Confirmation[Any]], Sequence[Any]] | None = None
    # SQLite: the idempotency key (tenant, key) whose answer must be recorded before the move (a
    # payment's creating request's); None: none.
    answered_key: Callable[[M], tuple[str, str]] | None = None


# ------------------------------------------------------------------ PostgreSQL: one call
# In autocommit, the call commits itself (ADR 0011). Every apply and confirm function takes the
# stored event's columns first (`stored_event_params`); every apply function takes the state
# event's, the audit event's and the result last (`events_params`), its object's in between.


def placeholders(count: int) -> str:
    """`?, ?, ...`: a call's arguments, `count` of them."""
    return ", ".join(["?"] * count)


# Each object's calls (its `Writing`'s), by the migration that defines them.
APPLY_PAYMENT = driver.binary_arrays(  # `*_inbound_apply_payment.py`: it reads the payment itself
    driver.statement(f"SELECT paycore_inbound_apply_payment({placeholders(14)}, ?::text[], {placeholders(9)})")
)
APPLY_REFUND = driver.binary_arrays(  # `*_inbound_refunds.py`
    driver.statement(f"SELECT paycore_inbound_apply_refund({placeholders(20)}, ?::text[], {placeholders(10)})")
)
CONFIRM_REFUND = driver.statement(f"SELECT paycore_inbound_confirm_refund({placeholders(15)})")
APPLY_PAYOUT = driver.binary_arrays(  # `*_inbound_payouts.py`
    driver.statement(f"SELECT paycore_inbound_apply_payout({placeholders(20)}, ?::text[], {placeholders(10)})")
)
CONFIRM_PAYOUT = driver.binary_arrays(
    driver.statement(f"SELECT paycore_inbound_confirm_payout({placeholders(8)}, ?::text[], {placeholders(5)})")
)
REFUSE_PAYOUT_RETURN = driver.binary_arrays(  # `*_inbound_payout_return_steps.py`: the confirm's and a note's
    driver.statement(f"SELECT paycore_inbound_refuse_payout_return({placeholders(8)}, ?::text[], {placeholders(9)})")
)
_SETTLE_PAYOUT_ARGS = (
    f"{placeholders(17)}, ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[],"
    f" {placeholders(15)}"
)
SETTLE_PAYOUT = driver.binary_arrays(  # `*_inbound_payout_settlement.py`
    driver.statement(f"SELECT paycore_inbound_settle_payout({_SETTLE_PAYOUT_ARGS})")
)
# A payout's postings and adjustments, as `*_inbound_payout_return.py`'s functions take them.
_POSTINGS = (
    "?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?, ?,"
    " ?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[]"
)
RETURN_PAYOUT = driver.binary_arrays(  # `*_inbound_payout_return.py`
    driver.statement(f"SELECT paycore_inbound_return_payout({placeholders(18)}, {_POSTINGS}, {placeholders(10)})")
)
_SETTLE_WAITING_PAYOUT_ARGS = f"{placeholders(15)}, ?::text[], {placeholders(8)}, {_POSTINGS}, {placeholders(10)}"
SETTLE_WAITING_PAYOUT = driver.binary_arrays(
    driver.statement(f"SELECT paycore_inbound_settle_waiting_payout({_SETTLE_WAITING_PAYOUT_ARGS})")
)
# `*_inbound_payout_return_steps.py`: a settlement function's arguments, then the return's step's
# (`paycore_payout_return`'s after the tenant and the payout).
_RETURN_STEP_ARGS = f"{placeholders(6)}, {_POSTINGS}, {placeholders(7)}"
RETURN_SENT_PAYOUT = driver.binary_arrays(
    driver.statement(f"SELECT paycore_inbound_return_sent_payout({_SETTLE_PAYOUT_ARGS}, {_RETURN_STEP_ARGS})")
)
RETURN_WAITING_PAYOUT = driver.binary_arrays(
    driver.statement(
        f"SELECT paycore_inbound_return_waiting_payout({_SETTLE_WAITING_PAYOUT_ARGS}, {_RETURN_STEP_ARGS})"
    )
)


def stored_event_params(webhook: dict[str, Any]) -> tuple[Any, ...]:
    """The stored event's arguments, first in each function: the tenant first of all."""
    return (webhook["tenant_id"], webhook["event_id"], webhook["type"], webhook["object_type"], webhook["payload"])


def events_params(plan: Plan[Any]) -> tuple[Any, ...]:
    """The state event's, the audit event's and the result's arguments, last in each apply function."""
    state_event, audit_event = plan.move.state_event, plan.audit_event
    return (
        *state_event_args(state_event),
        audit_event["id"],
        audit_event["type"],
        audit_event["data"],
        plan.webhook["status"],
    )


def apply_call(connection: Connection, writing: Writing[M], plan: Plan[M]) -> str:
    """Write the plan in one call: `applied` once committed, `duplicate` (nothing written) for
    an event stored before. An object moved first raises DBAPIError with SQLSTATE PC013, a
    refused move PC001-PC004 or PC009: nothing written."""
    webhook, audit_event, state_event = plan.webhook, plan.audit_event, plan.move.state_event
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert audit_event["actor"] == state_event["actor"] and audit_event["cause"] == webhook["status"]
    call = writing.apply_call if isinstance(writing.apply_call, driver.Statement) else writing.apply_call(plan)
    return _call(connection, call, writing.apply_params(plan), (APPLIED, DUPLICATE))


def confirm_call(connection: Connection, writing: Writing[Any], confirmation: Confirmation[Any]) -> str:
    """Write the plain case in one call: `stale` once committed, `duplicate` (nothing written)
    for an event stored before. An object no longer as read raises DBAPIError with SQLSTATE
    PC013: nothing written."""
    webhook, audit_event = confirmation.webhook, confirmation.audit_event
    assert writing.confirm_call is not None and writing.confirm_params is not None, "a plain case planned"
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert webhook["created_at_us"] == webhook["processed_at_us"] == audit_event["created_at_us"]
    return _call(connection, writing.confirm_call, writing.confirm_params(confirmation), (STALE, DUPLICATE))


def _call(connection: Connection, call: driver.Statement, params: Sequence[Any], results: tuple[str, str]) -> str:
    assert len(params) == call.sqlite.count("?"), (call.sqlite, len(params))
    [(result,)] = driver.fetch(connection, call, params)
    assert result in results, result
    return str(result)


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit), after the object's read: the event
# stored `applied` (nothing where it is stored already: a redelivery), the object's move (its
# `settle_repository.write_move`: the compare-and-set, a refund's ceiling released on a failure,
# the hold's resolution, the two accounts, the entries when posted, the state event), the audit
# event: 8 statements (a payment's or a payout's decline: 7, no entries), and BEGIN IMMEDIATE and
# the read.
WEBHOOK = driver.statement(
    f"INSERT INTO processor_webhooks ({', '.join(WEBHOOK_COLUMNS)}) VALUES ({', '.join('?' for _ in WEBHOOK_COLUMNS)})"
    " ON CONFLICT DO NOTHING RETURNING status"
)
# With an `answered_key` (a payment's), the event's INSERT itself reads whether that key's answer
# is recorded, and stores the event `unmatched` where it is not (then rolled back: `Unplain`).
_ANSWERED_VALUES = ", ".join(
    "CASE WHEN answered THEN ? ELSE ? END" if name == "status" else "?" for name in WEBHOOK_COLUMNS
)
WEBHOOK_ANSWERED = driver.statement(
    f"INSERT INTO processor_webhooks ({', '.join(WEBHOOK_COLUMNS)}) SELECT {_ANSWERED_VALUES}"
    ' FROM (SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE tenant_id = ? AND "key" = ?'
    " AND response_status IS NOT NULL) AS answered) WHERE true"
    " ON CONFLICT DO NOTHING RETURNING status"
)
_UNANSWERED: Final = "unmatched"  # a status the CHECK allows, never committed by this list
EVENT = driver.insert("events", EVENT_COLUMNS)


def write_statements(connection: Connection, writing: Writing[M], plan: Plan[M]) -> tuple[str, Accounts]:
    """Write the plan with the fixed list, inside the caller's transaction: (`applied`, the
    hold's two accounts) once written, (`duplicate`, []) for an event stored before (nothing
    written). Raises `Unplain` or `Refused` having written what the caller's rollback undoes."""
    if not _stored(connection, writing, plan):
        return DUPLICATE, []
    accounts = writing.write_move(connection, plan.move)
    if accounts is None:
        raise Unplain(f"{plan.audit_event['object_type']} {plan.audit_event['object_id']} is not as read any more")
    assert plan.audit_event.keys() <= set(EVENT_COLUMNS)
    driver.execute(connection, EVENT, [plan.audit_event.get(name) for name in EVENT_COLUMNS])
    return APPLIED, accounts


def _stored(connection: Connection, writing: Writing[M], plan: Plan[M]) -> bool:
    """The event stored `applied`; False for an event stored before (nothing written). Raises
    `Unplain` where the writing's `answered_key` has no answer recorded."""
    webhook = plan.webhook
    if writing.answered_key is None:
        return bool(driver.fetch(connection, WEBHOOK, [webhook[name] for name in WEBHOOK_COLUMNS]))
    values: list[object] = []
    for name in WEBHOOK_COLUMNS:  # the status twice: the answered case's, and the other's
        values += [webhook[name], _UNANSWERED] if name == "status" else [webhook[name]]
    found = driver.fetch(connection, WEBHOOK_ANSWERED, (*values, *writing.answered_key(plan.move)))
    if found and found[0][0] != APPLIED:
        raise Unplain(f"the request of {webhook['request_id']} has not answered: the reference path writes it")
    return bool(found)


def confirm_statements(connection: Connection, confirmation: Confirmation[Any]) -> str:
    """The plain case, inside the caller's transaction, after the object's read found it where
    the event says (nothing moves it in between: BEGIN IMMEDIATE): `stale`, or `duplicate`
    (nothing written) for an event stored before. 2 statements, and one per note."""
    if not driver.fetch(connection, WEBHOOK, [confirmation.webhook[name] for name in WEBHOOK_COLUMNS]):
        return DUPLICATE
    for note in confirmation.notes:
        assert note.keys() <= set(EVENT_COLUMNS) and "snapshot" not in note, note.keys()
        driver.execute(connection, EVENT, [note.get(name) for name in EVENT_COLUMNS])
    assert confirmation.audit_event.keys() <= set(EVENT_COLUMNS)
    driver.execute(connection, EVENT, [confirmation.audit_event.get(name) for name in EVENT_COLUMNS])
    return STALE
