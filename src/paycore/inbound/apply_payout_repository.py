"""The SQL of the bank's webhook that moves a payout, on the data plane (ADR 0026 step 3): the
one call on PostgreSQL, the fixed list of statements on SQLite. Each sends a `Plan`
(`apply_payout_plan.py`) as it is. The move's own statements and rules are the payout's settle
(`paycore_payouts_settle`, `payouts.settle_repository.write_move`): no copy of them here; the
stored event's and the audit event's statements are the refund's webhook's
(`apply_refund_repository.py`).

The reference path's order: the event stored first (its primary key decides a redelivery,
`duplicate`, writing nothing), then the payout's compare-and-set (its row lock), the hold, the
state event, then the audit event. A payout moved first or a refused write leave nothing
written (`Unplain` or `settle_repository.Refused`, rolled back; PostgreSQL's SQLSTATE PC013 and
PC001-PC004, PC009), and the reference path decides.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.inbound.apply_payout_plan import CONFIRMED_STATUSES, Confirmation, Plan
from paycore.inbound.apply_plan import APPLIED
from paycore.inbound.apply_refund_repository import EVENT, WEBHOOK
from paycore.inbound.receive_plan import STALE, WEBHOOK_COLUMNS
from paycore.inbound.receive_repository import DUPLICATE, Unplain
from paycore.payouts import settle_repository

# ------------------------------------------------------------------ PostgreSQL: one call
# The migration `*_inbound_payouts.py`; in autocommit, the call commits itself (ADR 0011).
_CALL = driver.binary_arrays(
    driver.statement(
        f"SELECT paycore_inbound_apply_payout({', '.join(['?'] * 20)}, ?::text[], {', '.join(['?'] * 10)})"
    )
)


def apply_call(connection: Connection, plan: Plan) -> str:
    """Write the plan in one call: `applied` once committed, `duplicate` (nothing written) for
    an event stored before. A payout moved first raises DBAPIError with SQLSTATE PC013, a
    refused move PC001-PC004 or PC009: nothing written."""
    webhook, move, audit_event = plan.webhook, plan.move, plan.audit_event
    accepted, moved, state_event, resolution = move.accepted, move.payout, move.state_event, move.resolution
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert audit_event["actor"] == state_event["actor"] and audit_event["cause"] == webhook["status"]
    # The function writes what `Machine.changes` writes for each target (`settle_plan.check_move`).
    assert (moved.fault_code, moved.faulted_at_us, moved.in_doubt_since_us) == (None, None, None), moved
    assert resolution.post or (moved.next_attempt_at_us, moved.claimed_by, moved.claimed_until_us) == (None,) * 3
    assert not resolution.post or moved.sent_at_us == moved.updated_at_us
    params = (
        webhook["tenant_id"],
        webhook["event_id"],
        webhook["type"],
        webhook["object_type"],
        webhook["payload"],
        accepted.id,
        accepted.status,
        accepted.updated_at_us,
        accepted.attempts,
        accepted.bank_reference,
        accepted.batch_id,
        accepted.failure_code,
        moved.updated_at_us,
        moved.status,
        moved.failure_code,
        moved.bank_reference,
        moved.batch_id,
        accepted.amount_minor,
        accepted.transfer_id,
        resolution.resolution_id,
        list(resolution.entry_ids or ()),
        state_event["id"],
        state_event["type"],
        state_event["cause"],
        state_event["actor"],
        state_event["data"],
        state_event["snapshot"],
        audit_event["id"],
        audit_event["type"],
        audit_event["data"],
        webhook["status"],
    )
    assert len(params) == _CALL.sqlite.count("?")
    [(result,)] = driver.fetch(connection, _CALL, params)
    assert result in (APPLIED, DUPLICATE), result
    return str(result)


# The plain case (the payout sent already): the same migration.
_CONFIRM_CALL = driver.binary_arrays(
    driver.statement(f"SELECT paycore_inbound_confirm_payout({', '.join(['?'] * 8)}, ?::text[], ?, ?, ?, ?, ?)")
)


def confirm_call(connection: Connection, confirmation: Confirmation) -> str:
    """Write the plain case in one call: `stale` once committed, `duplicate` (nothing written)
    for an event stored before. A payout no longer in those statuses raises DBAPIError with
    SQLSTATE PC013: nothing written."""
    webhook, payout, audit_event = confirmation.webhook, confirmation.payout, confirmation.audit_event
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert webhook["created_at_us"] == webhook["processed_at_us"] == audit_event["created_at_us"]
    params = (
        webhook["tenant_id"],
        webhook["event_id"],
        webhook["type"],
        webhook["object_type"],
        webhook["payload"],
        webhook["created_at_us"],
        webhook["status"],
        payout.id,
        list(CONFIRMED_STATUSES),
        audit_event["id"],
        audit_event["type"],
        audit_event["actor"],
        audit_event["data"],
        audit_event["cause"],
    )
    assert len(params) == _CONFIRM_CALL.sqlite.count("?")
    [(result,)] = driver.fetch(connection, _CONFIRM_CALL, params)
    assert result in (STALE, DUPLICATE), result
    return str(result)


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit), after the payout's read: the event
# stored `applied` (nothing where it is stored already: a redelivery), the payout's move
# (`payouts.settle_repository.write_move`: the compare-and-set, the hold's resolution, the two
# accounts, the entries when posted, the state event), the audit event: 8 statements for a
# payout sent, 7 for one failed (no entries), and BEGIN IMMEDIATE and the read.


def write_statements(connection: Connection, plan: Plan) -> tuple[str, settle_repository.Accounts]:
    """Write the plan with the fixed list, inside the caller's transaction: (`applied`, the
    hold's two accounts) once written, (`duplicate`, []) for an event stored before (nothing
    written). Raises `Unplain` or `settle_repository.Refused` having written what the caller's
    rollback undoes."""
    if not driver.fetch(connection, WEBHOOK, [plan.webhook[name] for name in WEBHOOK_COLUMNS]):
        return DUPLICATE, []
    accounts = settle_repository.write_move(connection, plan.move)
    if accounts is None:
        raise Unplain(f"payout {plan.move.accepted.id} is not {plan.move.expected_status} as read any more")
    assert plan.audit_event.keys() <= set(EVENT_COLUMNS) and len(accounts) == 2
    driver.execute(connection, EVENT, [plan.audit_event.get(name) for name in EVENT_COLUMNS])
    return APPLIED, accounts


def confirm_statements(connection: Connection, confirmation: Confirmation) -> str:
    """The plain case, inside the caller's transaction, after the payout's read found it sent
    already (nothing moves it in between: BEGIN IMMEDIATE): `stale`, or `duplicate` (nothing
    written) for an event stored before. 2 statements."""
    if not driver.fetch(connection, WEBHOOK, [confirmation.webhook[name] for name in WEBHOOK_COLUMNS]):
        return DUPLICATE
    assert confirmation.audit_event.keys() <= set(EVENT_COLUMNS)
    driver.execute(connection, EVENT, [confirmation.audit_event.get(name) for name in EVENT_COLUMNS])
    return STALE
