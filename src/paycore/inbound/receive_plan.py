"""The processor's webhook, *receive*, planned for the data plane (ADR 0026 step 3): pure
functions from a verified event to every row the reference path (`inbound.service.receive`)
would write for it in the plain case.

The plain case is the usual one: a charge event (`charge.succeeded`, `charge.failed`) for a
payment that is already in the status the event proves, with the payment's amount and
currency: the processor's synchronous answer settled it first, and the webhook only confirms.
The reference path stores the event (`processor_webhooks`), loads the payment, finds the move
not allowed from a terminal status (`Machine.apply_evidence`: `stale`), and records the event
on the payment's audit log as `stale`, changing nothing else. The plan holds those two rows as
the reference path leaves them: the stored event `stale`, tried once, done; the audit event
(`audit.webhook_row`, its cause `stale`).

Whether the payment *is* in that status with that amount and currency is for the write to
check, under its lock (`receive_repository.py`): when it is not (still `processing`, in doubt,
another status, a mismatch, unknown), nothing is written and the reference path decides.
Every other event (another type, another object, a status its type does not name) has no
plan: the reference path's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from paycore.audit.rows import EventContext, webhook_row
from paycore.inbound.schemas import ProcessorEvent
from paycore.payments import service as payments
from paycore.payments import states

# The event types the data plane reads, and the payment status each proves. Any other type
# (a refund's, a payout's, a capture's or a cancel's) is the reference path's.
PLAIN_TYPES: Final = {"charge.succeeded": states.SUCCEEDED, "charge.failed": states.FAILED}
STALE: Final = "stale"  # what `receive` answers, the stored event's status, the audit event's cause
# The stored event's columns (`inbound.models.processor_webhooks`), in the order they are sent.
WEBHOOK_COLUMNS: Final = (
    "tenant_id",
    "event_id",
    "type",
    "object_type",
    "request_id",
    "payload",
    "status",
    "attempts",
    "next_attempt_at_us",
    "created_at_us",
    "processed_at_us",
)
_WEBHOOK_NAMES: Final = frozenset(WEBHOOK_COLUMNS)


@dataclass(frozen=True)
class Plan:
    webhook: dict[str, Any]  # the stored event as the reference path leaves it (`WEBHOOK_COLUMNS`)
    payment_id: str  # the payment the event names (its request id is the payment's id)
    payment_status: str  # the status it must have: the one the event proves
    amount_minor: int  # ... and the amount and currency it must have (`payments.lifecycle.matches`)
    currency: str
    audit_event: dict[str, Any]  # the event on the payment's audit log (`audit.webhook_row`)

    @property
    def result(self) -> str:
        return STALE


def plain_status(event: ProcessorEvent) -> str | None:
    """The payment status a plain charge event proves, or None for the reference path."""
    status = PLAIN_TYPES.get(event.type)
    if status is None or event.data.object != "charge" or event.data.status != status:
        return None
    return status


def plan_receive(
    event: ProcessorEvent, payload: str, *, now_us: int, audit_event_id: str, context: EventContext
) -> Plan | None:
    """The rows the reference path writes for `event` (its signed body `payload`) when its
    payment is already in the status it proves; None for every other event."""
    status = plain_status(event)
    if status is None:
        return None
    data = event.data
    webhook = {
        "tenant_id": data.merchant_id,
        "event_id": event.id,
        "type": event.type,
        "object_type": data.object,
        "request_id": data.request_id,
        "payload": payload,
        "status": STALE,  # `rematch.settle`: a stale event is kept, tried once, done
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": now_us,
        "processed_at_us": now_us,
    }
    audit_event = webhook_row(
        data.merchant_id,
        event_id=audit_event_id,
        context=context,
        object_type=payments.MACHINE.object_type,
        object_id=data.request_id,
        event_type=event.type,
        result=STALE,
        payload={"event_id": event.id, "sequence": event.sequence, "status": data.status},
        now_us=now_us,
    )
    plan = Plan(webhook, data.request_id, status, data.amount_minor, data.currency, audit_event)
    _check_plan(plan)
    return plan


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the event proves a terminal status, from which the transition table
    allows no move (so the reference path finds it `stale`, not `conflict`: the same status);
    the stored event and the audit event say the same, at the same time, of the same payment."""
    status, webhook, audit_event = plan.payment_status, plan.webhook, plan.audit_event
    assert status in states.TERMINAL and not payments.MACHINE.allowed(status, status), status
    assert webhook.keys() == _WEBHOOK_NAMES, webhook.keys() ^ _WEBHOOK_NAMES
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert webhook["created_at_us"] == webhook["processed_at_us"] == audit_event["created_at_us"]
    assert (audit_event["object_id"], audit_event["tenant_id"]) == (plan.payment_id, webhook["tenant_id"])
    assert audit_event["type"] == f"webhook.{webhook['type']}" and "snapshot" not in audit_event
