"""The SQL of the processor's webhook's receive on the data plane (ADR 0026 step 3): the one
call on PostgreSQL, the fixed list of statements on SQLite. Each sends a `Plan`
(`receive_plan.py`) as it is; the only rule here is the one that needs the payment's row: it
must be in the status the event proves, with the event's amount and currency (a copy of
`payments.lifecycle.matches`, held to it by `test_receive_data_plane.py`'s mismatch).

The reference path's order: the event stored first (its primary key decides a redelivery,
`duplicate`, writing nothing), then the payment read (locked, on PostgreSQL), then the audit
event. A payment in another state (or missing, or for another amount) leaves nothing written
(`Unplain`, rolled back; PostgreSQL's SQLSTATE PC013), and the reference path decides.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit.statements import EVENT_COLUMNS
from paycore.db import driver
from paycore.inbound.receive_plan import STALE, WEBHOOK_COLUMNS, Plan

DUPLICATE: Final = "duplicate"


class Unplain(Exception):
    """The payment is not in the status the event proves: roll back, and let the reference
    path decide."""


# ------------------------------------------------------------------ PostgreSQL: one call
# The migration `*_inbound_receive.py`; in autocommit, the call commits itself (ADR 0011).
CALL = driver.statement("SELECT paycore_inbound_receive(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def receive_call(connection: Connection, plan: Plan) -> str:
    """Write the plan in one call: `stale` once committed, `duplicate` (nothing written) for an
    event stored before. A payment not in the planned status raises DBAPIError with SQLSTATE
    PC013, nothing written."""
    return received(plan, driver.fetch(connection, CALL, call_params(plan)))


def call_params(plan: Plan) -> tuple[Any, ...]:
    """The call's arguments (`CALL`), from the thread's connection or the event loop's."""
    webhook, audit_event = plan.webhook, plan.audit_event
    assert (webhook["attempts"], webhook["next_attempt_at_us"]) == (1, None), webhook
    assert webhook["created_at_us"] == webhook["processed_at_us"] == audit_event["created_at_us"]
    assert audit_event["cause"] == webhook["status"] and audit_event.keys() <= set(EVENT_COLUMNS)
    params = (
        webhook["tenant_id"],
        webhook["event_id"],
        webhook["type"],
        webhook["object_type"],
        webhook["request_id"],
        webhook["payload"],
        webhook["created_at_us"],
        webhook["status"],
        plan.payment_status,
        plan.amount_minor,
        plan.currency,
        audit_event["id"],
        audit_event["type"],
        audit_event["object_type"],
        audit_event["actor"],
        audit_event["data"],
    )
    assert len(params) == CALL.sqlite.count("?")
    return params


def received(plan: Plan, rows: list[tuple[Any, ...]]) -> str:
    """The call's answer: the webhook's status (`stale`), or `duplicate`."""
    [(result,)] = rows
    assert result in (plan.webhook["status"], DUPLICATE), result
    return str(result)


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the event stored, `stale` where
# the payment is in the planned status with the event's amount and currency, else `unmatched`
# (then rolled back: the reference path decides); nothing where it is stored already (the
# reference path's `insert_or_ignore`: a redelivery). Then the audit event. 2 statements (and
# BEGIN IMMEDIATE); a redelivery 1.
_WEBHOOK = driver.statement(
    f"INSERT INTO processor_webhooks ({', '.join(WEBHOOK_COLUMNS)})"
    f" SELECT {', '.join('CASE WHEN plain THEN ? ELSE ? END' if name == 'status' else '?' for name in WEBHOOK_COLUMNS)}"
    " FROM (SELECT EXISTS (SELECT 1 FROM payments WHERE tenant_id = ? AND id = ? AND status = ?"
    " AND amount_minor = ? AND currency = ?) AS plain) WHERE true"
    " ON CONFLICT DO NOTHING RETURNING status"
)
_EVENT = driver.insert("events", EVENT_COLUMNS)
_UNPLAIN: Final = "unmatched"  # a status the CHECK allows, never committed by this list


def write_statements(connection: Connection, plan: Plan) -> str:
    """Write the plan with the fixed list, inside the caller's transaction: `stale` once
    written, `duplicate` for an event stored before (nothing written). Raises `Unplain`
    having written what the caller's rollback undoes."""
    webhook = plan.webhook
    values: list[object] = []
    for name in WEBHOOK_COLUMNS:  # the status twice: the plain case's, and the other's
        values += [webhook[name], _UNPLAIN] if name == "status" else [webhook[name]]
    payment = (webhook["tenant_id"], plan.payment_id, plan.payment_status, plan.amount_minor, plan.currency)
    found = driver.fetch(connection, _WEBHOOK, (*values, *payment))
    if not found:
        return DUPLICATE
    if found[0][0] != STALE:
        raise Unplain(f"payment {plan.payment_id} is not {plan.payment_status} for {plan.amount_minor}")
    assert plan.audit_event.keys() <= set(EVENT_COLUMNS)
    driver.execute(connection, _EVENT, [plan.audit_event.get(name) for name in EVENT_COLUMNS])
    return STALE
