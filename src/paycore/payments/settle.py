"""A payment's second phase, *settle*, on the data plane (ADR 0026 step 3): plan, then one write;
and the same phase as the resolver's rounds apply it (`ROUND`, below).

After the processor answered the creating request's call, the planner (`settle_plan.py`) makes
every row of the phase and the answer; the write is one prepared call of
`paycore_payments_settle` on PostgreSQL (the migration `*_payments_settle.py`; an
authorization's, its hold kept pending, `paycore_payments_authorize` of `*_payments_authorize.py`; in autocommit:
it commits a success only) or the fixed list of `settle_repository.py` on SQLite, in one
transaction on the writer (ADR 0008's group commit).

The reference path (`service.create_payment`'s `finish`: the payment's lifecycle through
SQLAlchemy Core) stays the home of everything else, and `settle` answers None, having written
nothing, for it to decide: an answer that is not `succeeded` or `failed` for the payment as sent
(pending, no answer: the in-doubt path; a refusal; a mismatch), a payment moved first (a webhook
or the resolver won the compare-and-set: the reference path records the call and replays the
recorded answer), a refused write, and a PostgreSQL schema without the function (SQLSTATE 42883).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.db import loop_calls
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import Outcome
from paycore.in_doubt.plane import Settle, hold_resolution_ids
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.calls import Call
from paycore.lifecycle.evidence import Decision
from paycore.payments import move_plan, settle_plan, settle_repository, states
from paycore.payments.settle_types import KEEP, ROUND_COLUMNS, Move, NewIds, Plan
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult

# What the call may answer with, having written nothing, for the reference path to decide: its
# refusals (the ledger's PC001-PC003, PC004: the hold or the key settled already), a deadlock, a
# serialization failure, a schema without the function (this code runs from
# OLDEST_COMPATIBLE_REVISION on), and a statement of the function the database does not support
# (0A000: Citus refuses the events' numbering in it, ADR 0031). Any other error (PC009: the hold
# is not the payment's) is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC004", "40P01", "40001", "42883", "0A000"})


def settle(database: Database, accepted: Payment, call: Call[ChargeResult], *, actor: str) -> Outcome | None:
    """The creating request's answer once this phase wrote it; None, having written nothing,
    where the reference path must decide. `accepted` is the payment as the accept phase wrote
    it (`processing`), `actor` the request's. Raises DatabaseUnavailable as a transaction does."""
    plan = _plan(accepted, call, actor)
    if plan is None:
        return None
    accounts = _call(database, plan) if database.is_postgres else _write_sqlite(database, plan)
    return _written(accepted, plan, accounts)


async def settle_on_loop(
    database: Database, accepted: Payment, call: Call[ChargeResult], *, actor: str
) -> Outcome | None:
    """`settle` from the event loop, no worker thread: the same plan, written on PostgreSQL by
    the same call on a connection of the loop (`db/loop_calls.py`), on SQLite by its list
    handed to the writer (`Database.transaction_async`, as the accept's)."""
    plan = _plan(accepted, call, actor)
    if plan is None:
        return None
    if database.is_postgres:
        return _written(accepted, plan, await _call_on_loop(database, plan))
    try:
        accounts = await database.transaction_async(
            lambda connection: settle_repository.write_statements(connection, plan)
        )
    except settle_repository.Refused:
        return None
    return _written(accepted, plan, accounts)


def _plan(accepted: Payment, call: Call[ChargeResult], actor: str) -> Plan | None:
    return settle_plan.plan_settle(
        accepted,
        call,
        history=settle_plan.accepted_history(accepted, actor),
        actor=actor,
        now_us=clock_now_us(),
        new_ids=_new_ids(),
        context=EventContext.current(),
    )


def _written(accepted: Payment, plan: Plan, accounts: settle_repository.Accounts | None) -> Outcome | None:
    if accounts is None:
        return None
    # The hold's accounts as written: a later flow of this payment (a refund) finds their facts
    # cached, as the reference path's read of them left them.
    ledger.remember_accounts(accepted.tenant_id, accounts)
    return plan.answer


def _new_ids() -> NewIds:
    # In the reference path's order (the call's event before the state event, the clearing
    # account's entry before the destination's): ids made in one process increase.
    call_event_id, resolution_id, debit_entry_id, credit_entry_id, state_event_id = ids.new_ids_of(
        ("evt", "txn", "ent", "ent", "evt")
    )
    return NewIds(
        call_event_id=call_event_id,
        resolution_id=resolution_id,
        debit_entry_id=debit_entry_id,
        credit_entry_id=credit_entry_id,
        state_event_id=state_event_id,
    )


def _call(database: Database, plan: Plan) -> settle_repository.Accounts | None:
    """The hold's accounts once the call committed the phase; None, having written nothing,
    when the reference path must decide."""
    with database.autocommit() as connection:
        try:
            return settle_repository.phase_call(connection, plan)
        except DBAPIError as error:
            if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
                return None
            raise


async def _call_on_loop(database: Database, plan: Plan) -> settle_repository.Accounts | None:
    """`_call` from the event loop: the same call, its errors read alike."""
    sql, params = settle_repository.phase_statement(plan)
    try:
        rows = await loop_calls.fetch(database, sql, params, commits=True)
    except DBAPIError as error:
        if idempotency.left_to_reference(error, _DECIDED_BY_REFERENCE):
            return None
        raise
    return settle_repository.phase_accounts(plan, rows)


def _write_sqlite(database: Database, plan: Plan) -> settle_repository.Accounts | None:
    """The hold's accounts once the list committed the phase; None, having written nothing,
    when the reference path must decide."""
    try:
        return database.transaction(lambda connection: settle_repository.write_statements(connection, plan))
    except settle_repository.Refused:
        return None


# ------------------------------------------------------------------ a worker round's settle
def _ready(connection: Connection, payment: Payment) -> bool:
    """A payment `in_doubt` was answered when it left `processing`; one still `processing` needs
    its creating request's answer recorded, which the round's move does not write (the reference
    path writes it with the move, `lifecycle.apply_evidence`)."""
    return payment.status != states.PROCESSING or settle_repository.answered(connection, payment)


def _moved(move: Move) -> Payment:
    return move.payment


# What an authorization's (ADR 0029) `requires_capture` may carry: its figures and lifetime.
_AUTHORIZED_VALUES: Final = frozenset(
    {"processor_reference", "amount_capturable_minor", "amount_captured_minor", "authorization_expires_at_us"}
)


def _round_status(payment: Payment, decision: Decision) -> str | None:
    """The status a worker round's `decision` moves `payment` to by a settle's move (without the
    payment's call or answer): `move_plan.terminal_status`'s for an automatic payment; for an
    authorization (ADR 0029) waiting for the processor's word, nothing else in flight, one step
    to `requires_capture` (the hold kept) or `failed` (a declined authorization, the hold
    voided). None for the reference path. The amount and currency are the caller's to check."""
    if not payment.is_manual:
        return move_plan.terminal_status(payment, decision)
    if payment.status not in states.UNRESOLVED or payment.operation is not None or len(decision.path) != 1:
        return None
    target = decision.path[0]
    carried = {states.REQUIRES_CAPTURE: _AUTHORIZED_VALUES, states.FAILED: settle_plan.TERMINAL_VALUES}.get(target)
    if carried is None or not decision.values.keys() <= carried:
        return None
    assert "processor_reference" in decision.values, decision
    assert ("failure_code" in decision.values) == (target == states.FAILED), decision
    return target


def _plan_round_move(payment: Payment, target: str, decision: Decision, **given: Any) -> Move:
    """A worker round's move to `_round_status`'s target, its schedule among the columns
    (`ROUND_COLUMNS`): `move_plan.plan_terminal_move`'s, or an authorization's (the hold kept),
    checked."""
    if target != states.REQUIRES_CAPTURE:
        return move_plan.plan_terminal_move(payment, target, decision, columns=ROUND_COLUMNS, **given)
    move, changed = move_plan.plan_move(payment, target, decision, **given)
    move_plan.check_move(move, changed, columns=ROUND_COLUMNS)
    move_plan.check_authorized(move)
    assert move.expected_status in states.UNRESOLVED and move.payment.operation is None, move.payment
    return move


def _round_call(connection: Connection, move: Move) -> bool:
    """A worker round's move in one call: an authorization's by `paycore_payments_authorize`,
    any other by `paycore_payments_settle`, each without a call or an answer."""
    if move.hold == KEEP:
        return settle_repository.authorize_move_call(connection, move)
    return settle_repository.move_call(connection, move)


# The processor's word answering the resolver's status query or its send again, for a payment
# still `processing` or `in_doubt` with nothing in flight (`_round_status`): an automatic
# payment's `succeeded` or `failed`, an authorization's `requires_capture` (ADR 0029: the hold
# kept pending) or `failed`, written by the phase its webhook or its creating request writes it
# with (`_plan_round_move`; on PostgreSQL one call without a call or an answer,
# `settle_repository.move_call` of `paycore_payments_settle` or `authorize_move_call` of
# `paycore_payments_authorize`; on SQLite `settle_repository.write_round_move`, the fixed list,
# its schedule in the compare-and-set), as `in_doubt.plane` applies it. Every other answer (a
# capture's or cancel's in flight, pending, no answer, a refusal, a mismatch, a creating request
# not yet answered) is the reference path's (`lifecycle.apply_evidence`).
ROUND: Final = Settle(
    machine=move_plan.MACHINE,
    settled_status=_round_status,
    plan_move=_plan_round_move,
    # The resolution, the clearing account's entry, the destination's, the state event (the
    # round's calls are its attempts, recorded before; an authorization uses the state event's).
    new_ids=hold_resolution_ids(partial(NewIds, call_event_id="")),
    moved=_moved,
    write_move=settle_repository.write_round_move,
    call=_round_call,
    ready=_ready,
)
