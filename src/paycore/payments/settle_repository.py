"""The SQL of a payment's settle phase on the data plane (ADR 0026 step 3): the one call on
PostgreSQL, the fixed list of statements on SQLite. Each sends a `Plan` (`settle_plan.py`'s, a
`settle_types.py` shape) as it is; no rules here but the checks that need the rows' locks, which
are the ledger's (`paycore.ledger.limits`, applied as `paycore.ledger.postings._apply` applies
them).

The compare-and-set comes first: when it finds the payment moved (a webhook or the resolver
applied the processor's word first), nothing is written and the caller runs the reference
path, which records the call and replays the recorded answer. Whatever else would refuse (the
hold not pending, an account's limit, the key answered already) leaves nothing written too
(`Refused`, rolled back; PostgreSQL's SQLSTATE PC004 and the ledger's PC001-PC003), and the
reference path decides, as it always has.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection

from paycore.db import driver
from paycore.idempotency.service import Outcome
from paycore.ledger import hold_repository
from paycore.ledger.limits import TOTAL_MINOR_MAX, bound_before_adding
from paycore.payments import states
from paycore.payments.settle_types import KEEP, ROUND_COLUMNS, WRITTEN_COLUMNS, AccountMove, Move, Plan
from paycore.payments.types import Payment

# The hold's accounts as the write leaves them (`hold_repository.ACCOUNT_COLUMNS`).
ACCOUNT_COLUMNS = hold_repository.ACCOUNT_COLUMNS
Accounts = list[SimpleNamespace]


class Refused(hold_repository.Refused):
    """The write would be refused, or could not be made as planned: roll back, and let the
    reference path decide (a hold's refusal, as a refund's and a payout's settle raise it: the
    webhook's apply, `inbound/apply_object.py`, rolls back on either)."""


# ------------------------------------------------------------------ PostgreSQL: one call
# The migration `*_payments_settle.py`, with `*_inbound_apply.py`'s last argument (a declined
# authorization's lifetime); in autocommit, the call commits itself (ADR 0011).
_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT * FROM paycore_payments_settle(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[],"
        " ?::text[], ?::text[], ?, ?, ?, ?, ?, ?, ?)"
    )
)


def phase_call(connection: Connection, plan: Plan) -> Accounts | None:
    """Write the phase in one call (`phase_statement`, read by `phase_accounts`) on a worker
    thread's pooled connection; `settle.settle_on_loop` sends the same from the event loop."""
    sql, params = phase_statement(plan)
    return phase_accounts(plan, driver.fetch(connection, sql, params))


def phase_statement(plan: Plan) -> tuple[driver.Statement, tuple[Any, ...]]:
    """The creating request's settle in one call, with the call's event and the answer: an
    authorization's (to `requires_capture`, its hold kept) by `paycore_payments_authorize`, any
    other by `paycore_payments_settle`. A refusal comes out as DBAPIError with SQLSTATE
    PC001-PC004 (nothing written; PC004 for an authorization: the key answered already)."""
    assert plan.call_event["actor"] == plan.state_event["actor"]
    if plan.hold == KEEP:
        return _AUTHORIZE_CALL, _authorize_params(plan, plan.call_event, plan.answer)
    assert plan.answer_key == plan.accepted.idempotency_key, "the function answers the creating request"
    return _CALL, _settle_params(plan, plan.call_event, plan.answer)


def phase_accounts(plan: Plan, rows: list[tuple[Any, ...]]) -> Accounts | None:
    """What `phase_statement`'s rows say: the hold's two accounts once committed (none, [], for
    an authorization: no account moved), None (nothing written) when the compare-and-set found
    the payment moved."""
    if plan.hold == KEEP:
        assert len(rows) == 1, rows
        return [] if rows[0][0] else None
    if not rows:
        return None
    assert len(rows) == 2, rows
    return [SimpleNamespace(**dict(zip(ACCOUNT_COLUMNS, row, strict=True))) for row in rows]


def move_call(connection: Connection, move: Move) -> bool:
    """Write a payment's move alone (no call's event, no answer: a worker round's, whose calls
    are its attempts and whose payment's request was answered) by the same call, inside the
    caller's transaction: True once written, False (nothing written) when the compare-and-set
    found the payment moved. A refusal raises DBAPIError (PC001-PC004, PC009), for the caller's
    rollback."""
    assert move.hold != KEEP, "an authorization's move is `authorize_move_call`'s"
    rows = driver.fetch(connection, _CALL, _settle_params(move, None, None))
    assert len(rows) in (0, 2), rows
    return bool(rows)


def _settle_params(move: Move, call_event: dict[str, Any] | None, answer: Outcome | None) -> tuple[Any, ...]:
    """`paycore_payments_settle`'s arguments: the move, and the call's event and the key's answer
    where the phase writes them (NULL: not written, migration `*_inbound_apply.py`)."""
    accepted, moved = move.accepted, move.payment
    params = (
        accepted.tenant_id,
        accepted.id,
        accepted.idempotency_key,
        moved.updated_at_us,
        move.expected_status,
        moved.status,
        moved.failure_code,
        moved.processor_reference,
        accepted.amount_minor,
        accepted.transfer_id,
        accepted.destination_account_id,
        move.post,
        move.resolution_id,
        [entry.id for entry in move.entries],
        *_events_and_answer(move, call_event, answer),
        moved.authorization_expires_at_us,  # a declined authorization's lifetime; None otherwise
    )
    assert len(params) == _CALL.sqlite.count("?")
    assert moved.authorization_expires_at_us is None or moved.is_manual, moved
    return params


def _events_and_answer(move: Move, call_event: dict[str, Any] | None, answer: Outcome | None) -> tuple[Any, ...]:
    """The events' and the answer's arguments the settle's and the authorization's functions
    share: the call's event and the state event (ids, types, causes), the actor, their data, the
    snapshot, the key's answer; the call's event and the answer NULL where not written (0039,
    0053)."""
    state_event = move.state_event
    events = (call_event or dict.fromkeys(("id", "type", "cause")), state_event)
    return (
        [event["id"] for event in events],
        [event["type"] for event in events],
        [event["cause"] for event in events],
        state_event["actor"],
        call_event["data"] if call_event else None,
        state_event["data"],
        state_event["snapshot"],
        answer.status if answer else None,
        answer.body if answer else None,
    )


# An authorization's settle, its hold kept pending: the migration `*_payments_authorize.py`.
_AUTHORIZE_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_payments_authorize(?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[], ?::text[], ?, ?, ?, ?,"
        " ?, ?)"
    )
)


def authorize_move_call(connection: Connection, move: Move) -> bool:
    """Write an authorization's move alone (no call's event, no answer: a worker round's, as
    `move_call`; migration `*_authorize_without_call.py`) by the same call, inside the caller's
    transaction: True once written, False (nothing written) when the compare-and-set found the
    payment moved. A refusal raises DBAPIError, for the caller's rollback."""
    return bool(driver.fetch(connection, _AUTHORIZE_CALL, _authorize_params(move, None, None))[0][0])


def _authorize_params(move: Move, call_event: dict[str, Any] | None, answer: Outcome | None) -> tuple[Any, ...]:
    """`paycore_payments_authorize`'s arguments: the move, and the call's event and the key's
    answer where the phase writes them (NULL: not written)."""
    accepted, moved = move.accepted, move.payment
    assert move.hold == KEEP and moved.status == states.REQUIRES_CAPTURE and moved.amount_captured_minor == 0
    assert (moved.failure_code, moved.next_attempt_at_us, moved.claimed_by) == (None, None, None)
    params = (
        accepted.tenant_id,
        accepted.id,
        accepted.idempotency_key,
        moved.updated_at_us,
        move.expected_status,
        moved.processor_reference,
        accepted.amount_minor,
        moved.amount_capturable_minor,
        moved.authorization_expires_at_us,
        *_events_and_answer(move, call_event, answer),
    )
    assert len(params) == _AUTHORIZE_CALL.sqlite.count("?")
    return params


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the compare-and-set (RETURNING
# what the plan must agree with), the hold's resolution, the two accounts' totals, the entries
# (posted only), the state event (`write_move`: a webhook's move writes these alone,
# `inbound/apply_repository.py`), the call's event, the key's answer: 8 statements, 7 for a
# void, 4 for an authorization (its hold kept: no ledger row), and BEGIN IMMEDIATE. The
# reference path's order, so the lock order is its too.
_CAS_WHERE = (
    " WHERE tenant_id = ? AND id = ? AND status = ? AND updated_at_us < ? AND operation_idempotency_key IS ?"
    " RETURNING idempotency_key, amount_minor, currency, transfer_id, destination_account_id"
)
# A worker round's move (`write_round_move`, `in_doubt.plane`) is `write_move` alone, its
# schedule (`attempts` too) in the same compare-and-set: 6 statements, 5 for a void, 2 for an
# authorization (the compare-and-set and the state event); the creating request's settle writes
# `WRITTEN_COLUMNS` only (a round may have counted an attempt since its accept phase read the
# payment).
_CAS: dict[tuple[str, ...], driver.Statement] = {
    columns: driver.statement(f"UPDATE payments SET {', '.join(f'{column} = ?' for column in columns)}{_CAS_WHERE}")
    for columns in (WRITTEN_COLUMNS, ROUND_COLUMNS)
}
_CALL_EVENT = driver.statement(
    "INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,"
    " data, created_at_us) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?)"
)
# The hold's resolution and each account's totals: `ledger.hold_repository`'s, shared with a
# refund's settle (`refunds/settle_repository.py`).
_RESOLUTION = hold_repository.RESOLUTION
_TOTALS = hold_repository.RESOLVED_TOTALS
_CLEARING_TOTALS = driver.statement(_TOTALS.format(account="code = ?"))
_DESTINATION_TOTALS = driver.statement(_TOTALS.format(account="id = ?"))
_ENTRIES = hold_repository.ENTRY_PAIR
# Published: numbered after the payment's last published change in its own INSERT, as
# `audit/repository._INSERT_NEXT` numbers it; the trigger of migration 0015 queues it.
_STATE_EVENT = driver.statement(
    "INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,"
    " data, object_sequence, snapshot, created_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " (SELECT coalesce(max(object_sequence), 0) + 1 FROM events WHERE tenant_id = ? AND object_id = ?), ?, ?)"
)
_ANSWER = driver.statement(
    'UPDATE idempotency_keys SET response_status = ?, response_body = ? WHERE tenant_id = ? AND "key" = ?'
    " AND response_status IS NULL"
)


def write_statements(connection: Connection, plan: Plan) -> Accounts | None:
    """Write the phase with the fixed list, inside the caller's transaction: the hold's two
    accounts once written, None (nothing written) when the compare-and-set found the payment
    moved. Raises `Refused` having written what the caller's rollback undoes."""
    accounts = write_move(connection, plan)
    if accounts is None:
        return None
    write_event(connection, plan.call_event)
    answer = (plan.answer.status, plan.answer.body, plan.accepted.tenant_id, plan.answer_key)
    if driver.execute(connection, _ANSWER, answer) != 1:
        raise Refused("the request's answer was recorded already")
    return accounts


def write_move(connection: Connection, move: Move, *, columns: tuple[str, ...] = WRITTEN_COLUMNS) -> Accounts | None:
    """Write a payment's move (`settle_types.Move`) inside the caller's transaction: the
    compare-and-set (of `columns`), the hold's resolution and accounts, the state event. The
    hold's two accounts (none for a hold kept) once written; None (nothing written) when the
    compare-and-set found the payment moved. Raises `Refused` as `write_statements`."""
    accepted, moved = move.accepted, move.payment
    found = driver.fetch(
        connection,
        _CAS[columns],
        (
            *(getattr(moved, column) for column in columns),
            accepted.tenant_id,
            accepted.id,
            move.expected_status,
            moved.updated_at_us,
            accepted.operation_idempotency_key,  # None at a creation's settle; a capture's own key
        ),
    )
    if not found:
        return None
    assert found[0] == (
        accepted.idempotency_key,
        accepted.amount_minor,
        accepted.currency,
        accepted.transfer_id,
        accepted.destination_account_id,
    ), "the payment moved is the payment planned"
    accounts = [] if move.hold == KEEP else _resolve_hold(connection, move)
    write_event(connection, move.state_event)
    return accounts


def write_round_move(connection: Connection, move: Move) -> Accounts | None:
    """A worker round's move (`in_doubt.plane`), its schedule in the compare-and-set: as `write_move`."""
    return write_move(connection, move, columns=ROUND_COLUMNS)


# Whether the creating request's answer is recorded (a worker round's move writes none: the
# reference path writes it with the move from `processing`, `lifecycle.apply_evidence`).
_ANSWERED = driver.statement(
    'SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE tenant_id = ? AND "key" = ? AND response_status IS NOT NULL)'
)


def answered(connection: Connection, payment: Payment) -> bool:
    """Whether `payment`'s creating request has its answer recorded."""
    [(found,)] = driver.fetch(connection, _ANSWERED, (payment.tenant_id, payment.idempotency_key))
    return bool(found)


def _resolve_hold(connection: Connection, plan: Move) -> Accounts:
    """The hold posted or voided: its resolution, the two accounts' totals, the posted entries."""
    accepted, moved, tenant_id = plan.accepted, plan.payment, plan.accepted.tenant_id
    resolution = (plan.resolution_id, plan.resolution_kind, moved.updated_at_us, tenant_id, accepted.transfer_id)
    if not driver.fetch(connection, _RESOLUTION, (*resolution, accepted.id)):
        raise Refused(f"the hold {accepted.transfer_id} is not this payment's pending transfer any more")
    clearing = _apply(connection, plan, _CLEARING_TOTALS, plan.clearing_code, plan.clearing, "debit")
    destination = _apply(
        connection, plan, _DESTINATION_TOTALS, accepted.destination_account_id, plan.destination, "credit"
    )
    if plan.entries:
        driver.execute(connection, _ENTRIES, _entry_params(plan, (clearing, destination)))
    return [clearing, destination]


def write_event(connection: Connection, row: dict[str, Any]) -> None:
    """An event's row as planned (`audit.rows.event_row`'s shape)."""
    common = (row["tenant_id"], row["id"], row["kind"], row["type"], row["object_type"], row["object_id"])
    if "snapshot" not in row:
        assert row["from_state"] is None and row["to_state"] is None, row
        driver.execute(
            connection, _CALL_EVENT, (*common, row["cause"], row["actor"], row["data"], row["created_at_us"])
        )
        return
    assert "object_sequence" not in row, "numbered by the INSERT"
    changed = (row["from_state"], row["to_state"], row["cause"], row["actor"], row["data"])
    numbered = (row["tenant_id"], row["object_id"])
    driver.execute(connection, _STATE_EVENT, (*common, *changed, *numbered, row["snapshot"], row["created_at_us"]))


def _apply(
    connection: Connection, plan: Move, sql: driver.Statement, account: str, move: AccountMove, direction: str
) -> SimpleNamespace:
    """The account's totals moved, checked as `postings._apply` checks them: the account as
    the UPDATE left it (`ACCOUNT_COLUMNS`)."""
    delta = move.delta
    amounts = (
        delta.debits_posted_minor,
        delta.credits_posted_minor,
        delta.debits_pending_minor,
        delta.credits_pending_minor,
    )
    bounds = [bound_before_adding(amount, TOTAL_MINOR_MAX) for amount in amounts]
    hold = (plan.accepted.transfer_id, direction, plan.accepted.amount_minor)
    rows = driver.fetch(
        connection, sql, (*amounts, move.entries_added, account, plan.accepted.tenant_id, *bounds, *hold)
    )
    if not rows:
        raise Refused(f"{account}: not the hold's {direction} account, or past the range of a total")
    found = SimpleNamespace(**dict(zip(ACCOUNT_COLUMNS, rows[0], strict=True)))
    refusal = hold_repository.resolution_refusal(found, amounts, move.entries_added, plan.accepted.currency)
    if refusal is not None:
        raise Refused(refusal)
    return found


def _entry_params(plan: Move, accounts: tuple[SimpleNamespace, SimpleNamespace]) -> list[Any]:
    """The posted entries (clearing debit, destination credit), each numbered with its
    account's entry count after the UPDATE (one entry added to each)."""
    params: list[Any] = []
    for entry, account in zip(plan.entries, accounts, strict=True):
        params += [
            plan.accepted.tenant_id,
            entry.id,
            plan.resolution_id,
            account.id,
            entry.direction,
            entry.amount_minor,
            account.currency,
            account.entries_count,
            plan.payment.updated_at_us,
        ]
    return params
