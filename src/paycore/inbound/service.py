"""Webhooks from the processor (SPEC §10): the processor's inbound adapter. It turns the
processor's events into the port's result types and hands them, as evidence, to the domain
they concern through that domain's service.

`receive` checks the signature and its timestamp (5 minutes' tolerance) before anything
else: a bad one is refused and nothing is stored. A good one is stored under the
processor's event id (a redelivery is a no-op) and applied in the same transaction:
- a payment, refund or payout it proves moves through that domain's lifecycle (the one
  compare-and-set, by the request id, which is the object's id);
- a dispute's event makes the dispute (the first evidence of it) or moves it (`disputes.record`);
- an event older than the object's current state is kept as `stale` and changes nothing;
- an event for an object paycore does not know (yet) is kept as `unmatched` and matched
  again by a worker (`rematch_due`) with backoff: never dropped.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, cast

from pydantic import ValidationError
from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore
from paycore.disputes import service as disputes
from paycore.disputes.types import ProcessorDispute
from paycore.inbound import repository
from paycore.inbound.models import processor_webhooks
from paycore.inbound.schemas import EventData, ProcessorEvent
from paycore.kit import actors, signing, strict_json
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import parse_rfc3339
from paycore.kit.errors import InvalidRequest
from paycore.lifecycle import faults
from paycore.lifecycle.evidence import Applied, Evidence
from paycore.lifecycle.policy import Backoff, retry_at_us
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.processor.port import (
    CHARGE_STATUSES,
    DISPUTE_STATUSES,
    PAYOUT_STATUSES,
    RESULT_STATUSES,
    ChargeResult,
    ChargeStatus,
    PayoutResult,
    RefundResult,
    ResultStatus,
)
from paycore.reconciliation import service as reconciliation
from paycore.refunds import service as refunds

log = logging.getLogger(__name__)
REMATCH_JOB: Final = "rematch_webhooks"
REMATCH_ATTEMPTS_MAX = 50
# The lifecycle's backoff with jitter: kept events that failed together are not retried together.
REMATCH_BACKOFF: Final = Backoff(first_ms=1000, max_ms=3_600_000)


# What an event about each kind of object may say (a charge: an authorization's statuses too).
_STATUSES: Final[dict[str, tuple[str, ...]]] = {
    "charge": CHARGE_STATUSES,
    "refund": RESULT_STATUSES,
    "payout": PAYOUT_STATUSES,
    "dispute": DISPUTE_STATUSES,
}
# What a dispute's event must carry beyond every event's fields (docs/sandbox.md "Disputes").
_DISPUTE_FIELDS: Final = ("dispute_id", "charge_request_id", "type", "reason", "fee_minor", "evidence_due_by")
# The machine of the object each kind of event names (a fault is left on it).
_MACHINES: Final[dict[str, Any]] = {"charge": payments.MACHINE, "refund": refunds.MACHINE, "payout": payouts.MACHINE}


class InvalidSignature(InvalidRequest):
    code = "invalid_signature"


class InvalidWebhook(InvalidRequest):
    code = "invalid_webhook"


@dataclass(frozen=True)
class Received:
    event_id: str
    result: str  # applied | stale | unmatched | duplicate | mismatch


def receive(database: Database, secret: str, signature: str | None, body: bytes) -> Received:
    event = verified_event(secret, signature, body)

    def work(connection: Connection) -> Received:
        now = clock_now_us()  # read inside: the wait for the write lock comes before it
        row = {
            "tenant_id": event.data.merchant_id,
            "event_id": event.id,
            "type": event.type,
            "object_type": event.data.object,
            "request_id": event.data.request_id,
            "payload": body.decode(),
            "status": "unmatched",
            "attempts": 0,
            "next_attempt_at_us": None,
            "created_at_us": now,
            "processed_at_us": None,
        }
        if not insert_or_ignore(connection, processor_webhooks, row, ("tenant_id", "event_id")):
            return Received(event.id, "duplicate")
        result = _apply(connection, event, now)
        _settle(connection, event.data.merchant_id, event.id, result, attempts=1, now_us=now, rng=random.Random())
        return Received(event.id, result)

    return database.transaction(work)


def verified_event(secret: str, signature: str | None, body: bytes) -> ProcessorEvent:
    """The signed body as an event, once its signature and timestamp are checked (before
    anything else) and its status is one its object can have: the one home of what a webhook
    must be, read by `receive` and by the data plane's (`inbound/receive.py`)."""
    now = clock_now_us()
    try:
        signing.verify(secret, signature, body, now_s=now // 1_000_000)
    except signing.SignatureError as error:
        refused = InvalidSignature(str(error), param=signing.SIGNATURE_HEADER)
        refused.code = error.code if error.code.startswith("signature_timestamp") else "invalid_signature"
        raise refused from error
    event = _event(body)
    allowed = _STATUSES[event.data.object]
    if event.data.status not in allowed:
        raise InvalidWebhook(f"a {event.data.object} event cannot say {event.data.status}", param="data.status")
    missing = [name for name in _DISPUTE_FIELDS if getattr(event.data, name) is None]
    if event.data.object == "dispute" and missing:
        raise InvalidWebhook(f"a dispute event names its {missing[0]}", param=f"data.{missing[0]}")
    return event


def _event(body: bytes) -> ProcessorEvent:
    """The signed body as an event. A key repeated in one object is refused
    (`DuplicateJsonKey`, 400 `duplicate_json_key`), as in every body paycore reads: the
    processor's signature covers bytes that two readers could read as two events."""
    try:
        document = strict_json.loads(body)
    except (ValueError, RecursionError) as error:
        raise InvalidWebhook("the event does not have the documented shape: the body is not JSON") from error
    try:
        return ProcessorEvent.model_validate(document)
    except ValidationError as error:
        raise InvalidWebhook(f"the event does not have the documented shape: {error.errors()[0]['msg']}") from error


def _apply(connection: Connection, event: ProcessorEvent, now_us: int) -> str:
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


def charge_result(data: EventData) -> ChargeResult:
    """The charge the event describes; an authorization's with its amounts and expiry (read by
    the data plane's `apply_plan.py` too)."""
    expires_at = data.authorization_expires_at
    return ChargeResult(
        request_id=data.request_id,
        status=cast(ChargeStatus, data.status),  # checked against CHARGE_STATUSES on receipt
        processor_charge_id=data.processor_charge_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        failure_code=data.failure_code,
        capture=data.capture or "automatic",
        amount_capturable_minor=data.amount_capturable_minor,
        amount_captured_minor=data.amount_captured_minor,
        amount_released_minor=data.amount_released_minor,
        authorization_expires_at_us=None if expires_at is None else parse_rfc3339(expires_at),
    )


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


def refund_result(data: EventData) -> RefundResult:
    """The refund the event describes (read by the data plane's `apply_refund.py` too)."""
    return RefundResult(
        request_id=data.request_id,
        status=cast(ResultStatus, data.status),  # checked against RESULT_STATUSES on receipt
        processor_refund_id=data.processor_refund_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        failure_code=data.failure_code,
    )


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


def payout_result(data: EventData) -> PayoutResult:
    """The payout the event describes, its rail given (read by the data plane too)."""
    assert data.rail is not None and data.status in PAYOUT_STATUSES, data
    return PayoutResult(
        request_id=data.request_id,
        status=data.status,
        bank_payout_id=data.bank_payout_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        rail=data.rail,
        batch_id=data.batch_id,
        fee_minor=data.fee_minor or 0,
        failure_code=data.failure_code,
        return_code=data.return_code,
        return_amount_minor=data.return_amount_minor,
        return_fee_minor=data.return_fee_minor or 0,
    )


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


def _settle(
    connection: Connection,
    tenant_id: str,
    event_id: str,
    result: str,
    *,
    attempts: int,
    now_us: int,
    rng: random.Random,
) -> None:
    """The event's row after `attempts` tries to match it: done, or due again with the
    lifecycle's backoff and jitter, or abandoned once out of tries (the lifecycle's give-up)."""
    values: dict[str, Any] = {"attempts": attempts}
    if result == "unmatched":
        due = retry_at_us(attempts, REMATCH_BACKOFF, rng, now_us=now_us, attempts_max=REMATCH_ATTEMPTS_MAX)
        if due is None:
            values.update(status="abandoned", next_attempt_at_us=None, processed_at_us=now_us)
        else:
            values.update(status="unmatched", next_attempt_at_us=due)
    else:
        status = "applied" if result == "applied" else "stale"  # stale, mismatch, conflict: kept, not applied
        values.update(status=status, next_attempt_at_us=None, processed_at_us=now_us)
    repository.set_values(connection, tenant_id, event_id, values)


def rematch_due(database: Database, batch_max: int) -> int:
    """Try again to match kept `unmatched` events whose retry is due. Returns how many. An event
    whose object cannot be moved (`lifecycle.faults`) leaves the object on its fault and stays
    `unmatched`, tried again with backoff; the other events are matched."""

    def work(connection: Connection, *, isolation: faults.Isolation) -> int:
        now = clock_now_us()
        rows = repository.due_unmatched(connection, now, batch_max)
        rng = random.Random()
        for row in rows:
            about = {"event_id": row.event_id, "tenant_id": row.tenant_id}
            result = isolation.run(connection, partial(_rematch, connection, row.payload, now), about=about)
            if isinstance(result, faults.Fault):
                _fault(connection, row.tenant_id, row.payload, result, now_us=now, rng=rng)
                result = "unmatched"
            _settle(connection, row.tenant_id, row.event_id, result, attempts=row.attempts + 1, now_us=now, rng=rng)
        return len(rows)

    return faults.transaction(database, work)


def _rematch(connection: Connection, payload: str, now_us: int) -> str:
    return _apply(connection, ProcessorEvent.model_validate(json.loads(payload)), now_us)


def _fault(
    connection: Connection, tenant_id: str, payload: str, fault: faults.Fault, *, now_us: int, rng: random.Random
) -> None:
    """The object the event names left on `fault` (its schedule unchanged), if paycore has it;
    else there is only the `work_fault` line the isolation logged."""
    data = json.loads(payload).get("data", {})
    machine = _MACHINES.get(str(data.get("object")))
    item = None if machine is None else machine.find(connection, tenant_id, str(data.get("request_id")))
    if machine is None or item is None:
        return
    faults.left(
        connection,
        machine,
        item,
        fault,
        job=REMATCH_JOB,
        actor=actors.worker(REMATCH_JOB),
        now_us=now_us,
        policy=None,
        rng=rng,
    )


def oldest_rematch_due_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest kept event due to be matched again fell due (the rematch job's lag)."""
    return repository.oldest_rematch_due_us(connection, now_us)
