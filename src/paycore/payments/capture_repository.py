"""The SQL of a capture's and a cancel's two phases on the data plane (ADR 0026 step 3, ADR
0029): one call each on PostgreSQL (the migration `*_payments_authorize.py`'s
`paycore_payments_capture_begin` / `_finish` and `paycore_payments_cancel_begin` / `_finish`),
a fixed list each on SQLite. Each sends a plan (`capture_plan.py`) as it is.

Both write a success only. begin: a key that exists (None / False) or a lost compare-and-set
(`Lost`, SQLSTATE PC004: the claim rolled back with it) leave nothing written. finish: the
settle phase's list (`settle_repository.write_statements`, its compare-and-set also matching
the capture request's own key), or one call; a payment moved first leaves nothing written. The
caller then runs the reference path (`operations.py`), which decides, records and answers.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection

from paycore.db import driver
from paycore.payments import states
from paycore.payments.accept_repository import CLAIM
from paycore.payments.capture_plan import BEGIN_COLUMNS, BeginPlan
from paycore.payments.models import payments
from paycore.payments.settle_repository import ACCOUNT_COLUMNS, Accounts, write_event
from paycore.payments.settle_types import POST, VOID, Plan
from paycore.payments.types import Payment, payment_from_row


class Lost(Exception):
    """begin's compare-and-set found the payment other than as read: roll back (the key's claim
    too), and let the reference path decide."""


# ------------------------------------------------------------------ begin
# The authorization as begin reads it (`lifecycle.MACHINE.load`'s row, no lock) from the event
# loop on PostgreSQL (`capture.begin_on_loop`, `db/loop_calls.py`): every column, in the table's order.
_PAYMENT_COLUMNS = tuple(payments.c.keys())
LOAD_PAYMENT = driver.statement(f"SELECT {', '.join(_PAYMENT_COLUMNS)} FROM payments WHERE tenant_id = ? AND id = ?")


def payment_of(rows: Any) -> Payment | None:
    """The payment `LOAD_PAYMENT` read, or None: there is none."""
    if not rows:
        return None
    assert len(rows) == 1, "the primary key"
    return payment_from_row(dict(zip(_PAYMENT_COLUMNS, rows[0], strict=True)))


_BEGIN_CALLS = {
    states.CAPTURE: driver.statement(
        "SELECT paycore_payments_capture_begin(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ),
    states.CANCEL: driver.statement("SELECT paycore_payments_cancel_begin(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
}
# SQLite: BEGIN IMMEDIATE, the key's claim, the compare-and-set (the payment exactly as read:
# its status and its last change), the state event: 3 statements.
_BEGIN_CAS = driver.statement(
    f"UPDATE payments SET {', '.join(f'{column} = ?' for column in BEGIN_COLUMNS)}"
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us = ? AND operation IS NULL"
)


def begin_call(connection: Connection, plan: BeginPlan) -> bool:
    """begin in one call: True once committed, False (nothing written) if the key exists. A lost
    compare-and-set comes out as DBAPIError with SQLSTATE PC004 (nothing written)."""
    return begun(driver.fetch(connection, *begin_statement(plan)))


def begin_statement(plan: BeginPlan) -> tuple[driver.Statement, tuple[Any, ...]]:
    """begin's one call and its parameters: what `begin_call` sends on a worker thread's
    connection, and `capture.begin_on_loop` on one of the event loop's (`db/loop_calls.py`)."""
    moved, key, event = plan.payment, plan.key_row, plan.state_event
    _check_begin(plan)
    requested = (moved.capture_requested_minor,) if moved.operation == states.CAPTURE else ()
    params = (
        moved.tenant_id,
        key["key"],
        key["fingerprint"],
        key["created_at_us"],
        moved.id,
        plan.authorized.updated_at_us,
        moved.updated_at_us,
        *requested,
        moved.next_attempt_at_us,
        event["id"],
        event["type"],
        event["cause"],
        event["actor"],
        event["data"],
        event["snapshot"],
    )
    statement = _BEGIN_CALLS[str(moved.operation)]
    assert len(params) == statement.sqlite.count("?")
    return statement, params


def begun(rows: Any) -> bool:
    """Whether begin's call wrote the phase (False: the key exists, nothing written)."""
    return bool(rows[0][0])


def begin_statements(connection: Connection, plan: BeginPlan) -> bool:
    """begin with the fixed list, inside the caller's transaction: True once written, False
    (nothing written) if the key exists. Raises `Lost` having written what the rollback undoes."""
    moved, key = plan.payment, plan.key_row
    _check_begin(plan)
    if not driver.fetch(connection, CLAIM, (key["tenant_id"], key["key"], key["fingerprint"], key["created_at_us"])):
        return False
    found = (moved.tenant_id, moved.id, states.REQUIRES_CAPTURE, plan.authorized.updated_at_us)
    if driver.execute(connection, _BEGIN_CAS, (*(getattr(moved, c) for c in BEGIN_COLUMNS), *found)) != 1:
        raise Lost(f"payment {moved.id} moved since it was read")
    write_event(connection, plan.state_event)
    return True


def _check_begin(plan: BeginPlan) -> None:
    """What the function writes as constants, the plan must say too."""
    moved, key = plan.payment, plan.key_row
    assert moved.operation in _BEGIN_CALLS and (moved.status, moved.operation_idempotency_key) == (
        states.PROCESSING,
        key["key"],
    )
    assert (moved.fault_code, moved.faulted_at_us) == (None, None) and key["created_at_us"] <= moved.updated_at_us
    assert plan.state_event["from_state"] == states.REQUIRES_CAPTURE and "object_sequence" not in plan.state_event


# ------------------------------------------------------------------ finish
_FINISH_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT * FROM paycore_payments_capture_finish(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[],"
        " ?::text[], ?::text[], ?, ?, ?, ?, ?, ?)"
    )
)


_CANCEL_FINISH_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT * FROM paycore_payments_cancel_finish(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[],"
        " ?::text[], ?, ?, ?, ?, ?, ?)"
    )
)


def finish_call(connection: Connection, plan: Plan) -> Accounts | None:
    """finish in one call: the hold's two accounts once committed, None (nothing written) when
    the compare-and-set found the payment moved. A refusal: DBAPIError, SQLSTATE PC001-PC004."""
    return finished(driver.fetch(connection, *finish_statement(plan)))


def finish_statement(plan: Plan) -> tuple[driver.Statement, tuple[Any, ...]]:
    """finish's one call and its parameters (a capture's or a cancel's): what `finish_call`
    sends on a worker thread's connection, and `capture.finish_on_loop` on the event loop's."""
    started, moved = plan.accepted, plan.payment
    assert plan.answer_key == started.operation_idempotency_key and moved.amount_capturable_minor == 0
    assert (moved.failure_code, moved.next_attempt_at_us, moved.claimed_by) == (None, None, None)
    if started.operation == states.CANCEL:
        assert plan.hold == VOID and moved.status == states.CANCELED and not plan.entries
        return _CANCEL_FINISH_CALL, _cancel_params(plan)
    assert plan.hold == POST and moved.status == states.SUCCEEDED and started.operation == states.CAPTURE
    return _FINISH_CALL, _capture_params(plan)


def finished(rows: Any) -> Accounts | None:
    """The hold's two accounts finish's call wrote; None when it wrote nothing (the payment moved)."""
    if not rows:
        return None
    assert len(rows) == 2, rows
    return [SimpleNamespace(**dict(zip(ACCOUNT_COLUMNS, row, strict=True))) for row in rows]


def _cancel_params(plan: Plan) -> tuple[Any, ...]:
    started, moved, events = plan.accepted, plan.payment, (plan.call_event, plan.state_event)
    params = (
        started.tenant_id,
        started.id,
        plan.answer_key,
        moved.updated_at_us,
        moved.processor_reference,
        started.amount_minor,
        moved.authorization_expires_at_us,
        moved.cancellation_reason,
        started.transfer_id,
        started.destination_account_id,
        plan.resolution_id,
        [event["id"] for event in events],
        [event["type"] for event in events],
        [event["cause"] for event in events],
        plan.call_event["actor"],
        plan.call_event["data"],
        plan.state_event["data"],
        plan.state_event["snapshot"],
        plan.answer.status,
        plan.answer.body,
    )
    assert len(params) == _CANCEL_FINISH_CALL.sqlite.count("?")
    return params


def _capture_params(plan: Plan) -> tuple[Any, ...]:
    started, moved, events = plan.accepted, plan.payment, (plan.call_event, plan.state_event)
    params: tuple[Any, ...] = (
        started.tenant_id,
        started.id,
        plan.answer_key,
        moved.updated_at_us,
        moved.processor_reference,
        started.amount_minor,
        moved.amount_captured_minor,
        moved.authorization_expires_at_us,
        started.transfer_id,
        started.destination_account_id,
        plan.resolution_id,
        [entry.id for entry in plan.entries],
        [event["id"] for event in events],
        [event["type"] for event in events],
        [event["cause"] for event in events],
        plan.call_event["actor"],
        plan.call_event["data"],
        plan.state_event["data"],
        plan.state_event["snapshot"],
        plan.answer.status,
        plan.answer.body,
    )
    assert len(params) == _FINISH_CALL.sqlite.count("?")
    return params
