"""The dispute's status query (SPEC §6.2: "paycore learns of it by webhook, status query or
settlement report"): ask the processor for a dispute by its id, with no transaction open, then
record what it says through `service.record`, the one recording function the webhooks use (the
dispute made by its first evidence exactly once, its ledger transfer, its history, its events).

Who asks: `answers.refresh` (a dispute paycore holds), the worker's round over answers whose
reply was lost (`in_flight`), and reconciliation for a report line naming a dispute paycore
does not know (`reconciliation.disputes`): the line itself never makes the dispute, the
processor's answer to this query does.

What a query comes to (`Outcome`): `applied` (made or moved), `stale` (nothing new), `unmatched`
(the processor's dispute is on a payment paycore does not hold: nothing recorded), `unknown`
(the processor has no such dispute), `no_answer` (the query got none: it proves nothing).
"""

from __future__ import annotations

from typing import Final, Literal, cast

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.disputes import service
from paycore.disputes.types import Dispute, ProcessorDispute
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import parse_rfc3339
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.calls import record as record_call
from paycore.processor.port import DisputeResult, Processor

CAUSE: Final = "status_query"
OPERATION: Final = "get_dispute"

Outcome = Literal["applied", "stale", "unmatched", "unknown", "no_answer"]


def ask(processor: Processor, processor_dispute_id: str, *, ids: dict[str, str] | None = None) -> Call[DisputeResult]:
    """The processor's word on the dispute now. Never inside a database transaction."""
    return timed(
        OPERATION,
        {"dispute_id": processor_dispute_id},
        lambda: processor.get_dispute(processor_dispute_id),
        ids=ids or {"processor_dispute_id": processor_dispute_id},
    )


def apply(
    connection: Connection, call: Call[DisputeResult], *, actor: str, now_us: int, about: Dispute | None = None
) -> Outcome:
    """In the caller's transaction: the answer recorded (`service.record`), and the call on the
    dispute's audit log: `about` (the dispute asked about, when paycore holds it), else the one
    the answer names once recorded (made now, or before)."""
    assert call.operation == OPERATION, call.operation
    result = call.evidence.result
    outcome: Outcome = "unknown" if call.kind == "not_found" else "no_answer"
    if call.kind == "result" and result is not None:
        recorded = service.record(connection, seen(result), cause=CAUSE, actor=actor, now_us=now_us)
        assert recorded in ("applied", "stale", "unmatched"), recorded
        outcome = cast(Outcome, recorded)
    held = about
    if held is None and result is not None:
        held = service.find(connection, result.merchant_id, result.dispute_id)
    if held is not None:
        record_call(
            connection,
            held.tenant_id,
            object_type=service.OBJECT_TYPE,
            object_id=held.id,
            call=call,
            attempt=None,
            actor=actor,
            now_us=now_us,
        )
    return outcome


def query(database: Database, processor: Processor, processor_dispute_id: str, *, actor: str) -> Outcome:
    """Ask (no transaction open), then apply in one transaction."""
    call = ask(processor, processor_dispute_id)
    return database.transaction(lambda connection: apply(connection, call, actor=actor, now_us=clock_now_us()))


def seen(result: DisputeResult) -> ProcessorDispute:
    """The processor's dispute as `service.record` takes it."""
    return ProcessorDispute(
        processor_dispute_id=result.dispute_id,
        charge_request_id=result.charge_request_id,
        merchant_id=result.merchant_id,
        type=result.type,
        status=result.status,
        reason=result.reason,
        amount_minor=result.amount_minor,
        currency=result.currency,
        fee_minor=result.fee_minor,
        evidence_due_by_us=parse_rfc3339(result.evidence_due_by),
        evidence_submitted=result.evidence_submitted,
    )
