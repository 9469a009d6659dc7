"""The SQL of the processor's webhook's apply on the data plane (ADR 0026 step 3): the one
call on PostgreSQL (a `CallPlan`: the function reads the payment itself), the fixed list of
statements on SQLite (a `Plan`, made from the payment read in the same transaction). Each sends
its plan as it is. The move's own statements and rules are the settle phase's
(`paycore_payments_settle`, `settle_repository.write_move`): no copy of them here. The only
rule here needs the key's row: the creating request's answer must be recorded already (else
the reference path writes it, as `payments.lifecycle.apply_evidence` does).

The reference path's order: the event stored first (its primary key decides a redelivery,
`duplicate`, writing nothing), then the payment's compare-and-set (its row lock), the hold, the
state event, then the audit event. A payment moved first, an answer not yet recorded, a refused
write leave nothing written (`Unplain` or `settle_repository.Refused`, rolled back;
PostgreSQL's SQLSTATE PC013 and PC001-PC004), and the reference path decides.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.inbound.apply_plan import APPLIED, CallPlan, Plan
from paycore.inbound.receive_plan import WEBHOOK_COLUMNS
from paycore.inbound.receive_repository import DUPLICATE, Unplain
from paycore.payments import settle_repository

# ------------------------------------------------------------------ PostgreSQL: one call
# The migration `*_inbound_apply_payment.py`; in autocommit, the call commits itself (ADR 0011).
# It reads the payment (under its lock), checks it as `apply_plan._movable` does, and makes the
# state event's `from_state` and snapshot from it: no read before it.
_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_inbound_apply_payment(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?, ?, ?, ?, ?, ?,"
        " ?, ?, ?)"
    )
)


def apply_call(connection: Connection, plan: CallPlan) -> str:
    """Write the plan in one call: `applied` once committed, `duplicate` (nothing written) for
    an event stored before. A payment the event does not move (`apply_plan._movable`, checked on
    the locked row), one moved first, or an answer not recorded raises DBAPIError with SQLSTATE
    PC013, a refused move PC001-PC004: nothing written."""
    webhook, state_event, audit_event, new_ids = plan.webhook, plan.state_event, plan.audit_event, plan.new_ids
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert webhook["created_at_us"] == state_event["created_at_us"] == audit_event["created_at_us"]
    assert audit_event["actor"] == state_event["actor"] and audit_event["cause"] == webhook["status"]
    params = (
        webhook["tenant_id"],
        webhook["event_id"],
        webhook["type"],
        webhook["object_type"],
        webhook["payload"],
        webhook["request_id"],
        webhook["created_at_us"],
        plan.status,
        plan.failure_code,
        plan.processor_reference,
        plan.amount_minor,
        plan.currency,
        plan.post,
        new_ids.resolution_id,
        [new_ids.debit_entry_id, new_ids.credit_entry_id] if plan.post else [],
        state_event["id"],
        state_event["type"],
        state_event["cause"],
        state_event["actor"],
        state_event["data"],
        audit_event["id"],
        audit_event["type"],
        audit_event["data"],
        webhook["status"],
    )
    assert len(params) == _CALL.sqlite.count("?")
    [(result,)] = driver.fetch(connection, _CALL, params)
    assert result in (APPLIED, DUPLICATE), result
    return str(result)


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit), after the payment's read: the
# event stored, `applied` where the creating request's answer is recorded, else `unmatched`
# (then rolled back: the reference path writes the answer); nothing where it is stored already
# (a redelivery). Then the settle phase's move (`settle_repository.write_move`: the
# compare-and-set, the hold's resolution, the two accounts, the entries when posted, the state
# event) and the audit event: 8 statements, 7 for a decline (and BEGIN IMMEDIATE and the read).
_VALUES = ", ".join("CASE WHEN answered THEN ? ELSE ? END" if name == "status" else "?" for name in WEBHOOK_COLUMNS)
_WEBHOOK = driver.statement(
    f"INSERT INTO processor_webhooks ({', '.join(WEBHOOK_COLUMNS)}) SELECT {_VALUES}"
    ' FROM (SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE tenant_id = ? AND "key" = ?'
    " AND response_status IS NOT NULL) AS answered) WHERE true"
    " ON CONFLICT DO NOTHING RETURNING status"
)
_EVENT = driver.insert("events", EVENT_COLUMNS)
_UNANSWERED: Final = "unmatched"  # a status the CHECK allows, never committed by this list


def write_statements(connection: Connection, plan: Plan) -> tuple[str, settle_repository.Accounts]:
    """Write the plan with the fixed list, inside the caller's transaction: (`applied`, the
    hold's two accounts) once written, (`duplicate`, []) for an event stored before (nothing
    written). Raises `Unplain` or `settle_repository.Refused` having written what the caller's
    rollback undoes."""
    webhook, move = plan.webhook, plan.move
    values: list[object] = []
    for name in WEBHOOK_COLUMNS:  # the status twice: the answered case's, and the other's
        values += [webhook[name], _UNANSWERED] if name == "status" else [webhook[name]]
    key = (move.accepted.tenant_id, move.accepted.idempotency_key)
    found = driver.fetch(connection, _WEBHOOK, (*values, *key))
    if not found:
        return DUPLICATE, []
    if found[0][0] != APPLIED:
        raise Unplain(f"the answer of payment {move.accepted.id} is not recorded: the reference path writes it")
    accounts = settle_repository.write_move(connection, move)
    if accounts is None:
        raise Unplain(f"payment {move.accepted.id} is not {move.expected_status} any more")
    assert plan.audit_event.keys() <= set(EVENT_COLUMNS) and len(accounts) == 2
    driver.execute(connection, _EVENT, [plan.audit_event.get(name) for name in EVENT_COLUMNS])
    return APPLIED, accounts
