"""One object's whole story for the console: every state change (from, to, cause,
actor, time), every call to the processor or bank (request, answer or error, latency), every
webhook in and every delivery out, every ledger transfer with its entries, every break, every
person's action (manual resolutions, asking again, approvals) — one list, in time order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.ledger import service as ledger
from paycore.ledger.errors import TransferNotFound
from paycore.manual_resolutions import service as resolutions
from paycore.manual_resolutions.types import Resolution
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.types import Break
from paycore.webhooks import service as webhooks
from paycore.webhooks.errors import EventNotFound

EVENTS_MAX: Final = 500  # an object's audit records shown; a payment has a dozen
_KIND_LABELS: Final = {
    "state_change": "state change",
    "processor_call": "call",
    "webhook": "webhook in",
    "api_call": "API",
    "adjustment": "adjustment",
    "note": "note",
}


@dataclass(frozen=True)
class Entry:
    at_us: int
    kind: str  # state change, call, webhook in, webhook out, transfer, break, person, ...
    summary: str
    actor: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    link: str | None = None


@dataclass(frozen=True)
class Story:
    entries: list[Entry]
    breaks: list[Break]
    resolutions: list[Resolution]


def story(connection: Connection, tenant_id: str, object_id: str, transfer_ids: list[str]) -> Story:
    events = audit.events_of(connection, tenant_id, object_id, limit=EVENTS_MAX)
    found_resolutions = resolutions.of_object(connection, tenant_id, object_id)
    entries = [entry_of(event) for event in events]
    for resolution in found_resolutions:
        entries += [entry_of(event) for event in audit.events_of(connection, tenant_id, resolution.id, limit=20)]
    entries += _deliveries(connection, tenant_id, events)
    entries += _transfers(connection, tenant_id, transfer_ids)
    found_breaks = reconciliation.breaks_naming(connection, tenant_id, object_id)
    entries.sort(key=lambda entry: entry.at_us)
    return Story(entries, found_breaks, found_resolutions)


def entry_of(event: Event) -> Entry:
    """One audit record as a line of a timeline (also a dispute's history: http/console/disputes.py)."""
    label = _KIND_LABELS.get(event.kind, event.kind)
    if event.kind == "state_change":
        arrow = f"{event.from_state or '∅'} → {event.to_state}"
        if event.object_type == "manual_resolution":
            label, arrow = "person", f"manual resolution {event.to_state} ({event.data.get('outcome')})"
        summary = f"{arrow} ({event.cause})"
    elif event.kind == "processor_call":
        summary = f"{event.type} → {event.cause}"
        latency = event.data.get("latency_ms")
        if latency is not None:
            summary += f" in {latency} ms"
        if event.data.get("attempt") is not None:
            summary += f", attempt {event.data['attempt']}"
    elif event.kind == "webhook":
        summary = f"{event.type} ({event.cause})"
    elif event.type.endswith(".faulted"):  # a worker round could not move it (lifecycle.faults)
        label = "fault"
        summary = f"{event.data.get('error')} in {event.data.get('job')}, left {event.data.get('status')}"
    else:
        summary = f"{event.type} ({event.cause})"
        if event.type.endswith("asked_again"):
            label = "person"
    return Entry(event.created_at_us, label, summary, event.actor, event.data)


def _deliveries(connection: Connection, tenant_id: str, events: list[Event]) -> list[Entry]:
    """Each published change's deliveries to the tenant's endpoints, one entry per attempt."""
    found: list[Entry] = []
    for event in events:
        if event.kind != "state_change":
            continue
        try:
            deliveries, attempts = webhooks.deliveries_of(connection, tenant_id, event.id)
        except EventNotFound:
            continue
        by_delivery = {delivery.id: delivery for delivery in deliveries}
        for attempt in attempts:
            delivery = by_delivery.get(attempt.delivery_id)
            endpoint = delivery.endpoint_id if delivery else attempt.endpoint_id
            code = attempt.status_code if attempt.status_code is not None else (attempt.error or "no answer")
            summary = f"{event.type} to {endpoint}: {attempt.outcome} ({code}) in {attempt.latency_ms} ms"
            details = {
                "delivery_id": attempt.delivery_id,
                "attempt": attempt.attempt,
                "excerpt": attempt.response_excerpt,
            }
            found.append(Entry(attempt.created_at_us, "webhook out", summary, "worker:deliver_webhooks", details))
        for delivery in deliveries:
            if delivery.status == "pending" and delivery.attempts == 0:
                found.append(
                    Entry(delivery.created_at_us, "webhook out", f"{event.type} to {delivery.endpoint_id}: queued")
                )
    return found


def _transfers(connection: Connection, tenant_id: str, transfer_ids: list[str]) -> list[Entry]:
    found: list[Entry] = []
    for transfer_id in transfer_ids:
        try:
            transfer = ledger.get_transfer(connection, tenant_id, transfer_id)
        except TransferNotFound:
            continue
        lines = [
            {
                "account": entry.account_id,
                "direction": entry.direction,
                "amount_minor": entry.amount_minor,
                "currency": entry.currency,
            }
            for entry in transfer.entries
        ]
        summary = f"transfer {transfer.id} ({transfer.kind}, {transfer.status})"
        details: dict[str, Any] = {"entries": lines}
        if transfer.resolved_by:
            details["resolved_by"] = transfer.resolved_by
        found.append(Entry(transfer.created_at_us, "transfer", summary, "", details))
    return found
