"""What the reference path makes of a processor's event (SPEC §10): matched to the object it
names and applied, as evidence, through that domain's service, then recorded on the object's
audit log with the outcome (`match`):
- a payment, refund or payout it proves moves through that domain's lifecycle (the one
  compare-and-set, by the request id, which is the object's id);
- a dispute's event makes the dispute (the first evidence of it) or moves it (`disputes.record`);
- an event older than the object's current state is `stale` and changes nothing; a final answer
  that contradicts a final state is a `conflict`, flagged for a person;
- an event for an object paycore does not know (yet) is `unmatched`: kept and matched again
  (`rematch.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.disputes import service as disputes
from paycore.disputes.types import ProcessorDispute
from paycore.inbound.events import charge_result, payout_result, refund_result
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.kit.clock import parse_rfc3339
from paycore.lifecycle.evidence import Applied, Evidence
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.processor.port import PAYOUT_STATUSES
from paycore.reconciliation import service as reconciliation
from paycore.refunds import service as refunds

log = logging.getLogger("paycore.inbound.service")  # its name before `service.py` was split


def match(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
    """What paycore made of the event: applied, stale, conflict, mismatch or unmatched (or a
    dispute's outcome), the object moved and the event recorded on its audit log."""
    if event.data.object == "charge":
        return _apply_charge(connection, event, now_us)
    if event.data.object == "refund":
        return _apply_refund(connection, event, now_us)
    if event.data.object == "dispute":
        return _apply_dispute(connection, event, now_us)
    return _apply_payout(connection, event, now_us)


def _apply_dispute(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
    """The dispute the event describes, made by its first evidence or moved (`disputes.record`)."""
    data = event.data
    assert data.dispute_id and data.type and data.reason and data.evidence_due_by and data.fee_minor is not None
    seen = ProcessorDispute(
        processor_dispute_id=data.dispute_id,
        charge_request_id=data.request_id,
        merchant_id=data.merchant_id,
        type=data.type,
        status=data.status,
        reason=data.reason,
        amount_minor=data.amount_minor,
        currency=data.currency,
        fee_minor=data.fee_minor,
        evidence_due_by_us=parse_rfc3339(data.evidence_due_by),
        evidence_submitted=bool(data.evidence_submitted),
    )
    outcome = disputes.record(connection, seen, cause="webhook", actor=actors.PROCESSOR, now_us=now_us)
    if outcome != "unmatched":
        found = disputes.find(connection, data.merchant_id, data.dispute_id)
        assert found is not None
        _record(connection, event, disputes.OBJECT_TYPE, found.id, outcome, now_us)
    return outcome


def _apply_charge(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
    data = event.data
    payment = payments.MACHINE.find(connection, data.merchant_id, data.request_id, for_update=True)
    if payment is None:
        return "unmatched"
    evidence = Evidence.of_result(charge_result(data))
    applied = payments.apply_evidence(
        connection, payment, evidence, cause="webhook", actor=actors.PROCESSOR, now_us=now_us
    )
    return _judged(connection, event, "payment", payment.status, applied, now_us)


def _apply_refund(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
    """The refund whose request id (= its id) the event names, in the merchant's tenant."""
    data = event.data
    refund = refunds.MACHINE.find(connection, data.merchant_id, data.request_id, for_update=True)
    if refund is None:
        return "unmatched"
    evidence = Evidence.of_result(refund_result(data))
    applied = refunds.apply_evidence(
        connection, refund, evidence, cause="webhook", actor=actors.PROCESSOR, now_us=now_us
    )
    return _judged(connection, event, "refund", refund.status, applied, now_us)


def _judged(
    connection: Connection, event: ProcessorEvent, kind: str, was: str, applied: Applied[Any], now_us: int
) -> str:
    """What paycore made of a charge or refund event, recorded on the object's audit log."""
    outcome = "applied" if applied.changed else ("mismatch" if applied.reason == "mismatch" else "stale")
    status: str = event.data.status
    if kind == "payment":
        # What a charge's status proves, in the payment's words (`captured` is `succeeded`);
        # `requires_capture`, like `pending`, is never final: an older event, not a contradiction.
        status = payments.state_proved(status) or "pending"
    if outcome == "stale" and status not in ("pending", "requires_capture") and status != was:
        # A final answer that contradicts a final state: never applied, flagged for a person.
        outcome = "conflict"
        log.warning("webhook %s says %s for %s %s, which is %s", event.id, status, kind, applied.item.id, was)
        _contradiction(connection, event, kind, applied.item, was, now_us)
    _record(connection, event, kind, applied.item.id, outcome, now_us)
    return outcome


def _contradiction(
    connection: Connection, event: ProcessorEvent, kind: str, item: Any, status: str, now_us: int
) -> None:
    """A final answer that contradicts what a person confirmed by hand opens a break (ADR 0016)."""
    payload = {"event_id": event.id, "type": event.type, "status": event.data.status}
    reconciliation.record_contradiction(
        connection,
        event.data.merchant_id,
        kind,  # type: ignore[arg-type]
        item,
        status=status,
        reported=event.data.status,
        evidence=payload,
        source_id=event.id,
        actor=actors.PROCESSOR,
        now_us=now_us,
    )


def _apply_payout(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
    """The payout whose id (= the bank's request id) the event names."""
    data = event.data
    payout = payouts.MACHINE.find(connection, data.merchant_id, data.request_id, for_update=True)
    if payout is None or data.status not in PAYOUT_STATUSES or data.rail is None:
        return "unmatched"
    evidence = Evidence.of_result(payout_result(data))
    applied = payouts.apply_evidence(
        connection, payout, evidence, cause="webhook", actor=actors.PROCESSOR, now_us=now_us
    )
    moved, outcome = applied.item, applied.reason
    if outcome in ("stale", "no_change"):  # settled may not be terminal, yet a rejection contradicts it
        _contradiction(connection, event, "payout", moved, payouts.public_status(moved.status), now_us)
    _record(connection, event, "payout", payout.id, outcome, now_us)
    return outcome if outcome in ("applied", "mismatch") else "stale"  # no_change, stale, late: kept, not applied


def _record(
    connection: Connection, event: ProcessorEvent, object_type: str, object_id: str, outcome: str, now_us: int
) -> None:
    """The event on the object's audit log, with what paycore made of it."""
    audit.record_webhook(
        connection,
        event.data.merchant_id,
        object_type=object_type,
        object_id=object_id,
        event_type=event.type,
        result=outcome,
        payload={"event_id": event.id, "sequence": event.sequence, "status": event.data.status},
        now_us=now_us,
    )
