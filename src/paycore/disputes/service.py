"""Disputes' rules (SPEC §6.2, ADR 0030).

`record` applies what the processor says of a dispute (a webhook's data, a status query's
answer, a report line), in the caller's transaction. The first evidence that arrives makes the
dispute, exactly once whatever the order: the payment's row is locked first (the lock order of
refunds), then the row is inserted unless the processor's dispute id is known (a unique key per
tenant), else the known row is locked and moved. A status the transition table does not lead to
from the current one is older news: recorded as stale, nothing moves. Money follows the status
reached (`money.py`): a chargeback's amount and fee are withdrawn once, a won one's amount is
reinstated once, whichever steps the news skipped.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from sqlalchemy import Connection

from paycore.audit import rows as audit_rows
from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.disputes import money, repository, states
from paycore.disputes.errors import DisputeNotFound
from paycore.disputes.schemas import HISTORY_LENGTH_MAX, dispute_json, dispute_object
from paycore.disputes.types import Dispute, ProcessorDispute, dispute_from_row
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import parse_rfc3339
from paycore.kit.errors import InvalidStartingAfter
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.calls import record as record_call
from paycore.payments import service as payments
from paycore.payments.types import Payment
from paycore.processor.port import DisputeResult, Processor

OBJECT_TYPE: Final = "dispute"
ID_PREFIX: Final = "dp"
count_by_status: Final = repository.count_by_status  # `/metrics`: paycore_disputes{status}
evidence_due_first: Final = repository.evidence_due_first  # `/metrics`: the nearest deadline


def record(connection: Connection, seen: ProcessorDispute, *, cause: str, actor: str, now_us: int) -> str:
    """What paycore made of the processor's word: `applied`, `stale` (older than what is held,
    or nothing new) or `unmatched` (no such payment here yet: the caller keeps the evidence)."""
    assert seen.status in states.STATUSES, seen.status
    payment = payments.MACHINE.find(connection, seen.merchant_id, seen.charge_request_id, for_update=True)
    if payment is None:
        return "unmatched"
    born = _insert(connection, payment, seen, now_us)
    row = repository.by_processor_id(connection, seen.merchant_id, seen.processor_dispute_id, for_update=True)
    assert row is not None  # inserted now, or before (the unique key)
    dispute = dispute_from_row(row)
    if seen.status not in states.OPEN or seen.evidence_submitted:
        # The processor takes no more answers for it: any answer whose reply was lost is settled.
        repository.clear_in_flight(connection, dispute.tenant_id, dispute.id)
    if born:
        _move(connection, payment, dispute, None, seen, cause=cause, actor=actor, now_us=now_us)
        return "applied"
    if not states.allowed(dispute.status, seen.status):
        return "stale"
    _move(connection, payment, dispute, dispute.status, seen, cause=cause, actor=actor, now_us=now_us)
    return "applied"


def _insert(connection: Connection, payment: Payment, seen: ProcessorDispute, now_us: int) -> bool:
    values: dict[str, Any] = {
        "tenant_id": payment.tenant_id,
        "id": ids.new_id(ID_PREFIX),
        "processor_dispute_id": seen.processor_dispute_id,
        "payment_id": payment.id,
        "type": seen.type,
        "status": seen.status,
        "reason": seen.reason,
        "amount_minor": seen.amount_minor,
        "currency": seen.currency,
        "fee_minor": seen.fee_minor,
        "evidence_due_by_us": seen.evidence_due_by_us,
        "withdrawn_minor": 0,
        "reinstated_minor": 0,
        "withdrawal_transfer_id": None,
        "reinstatement_transfer_id": None,
        "created_at_us": now_us,
        "updated_at_us": now_us,
    }
    return repository.insert_once(connection, values)


def _move(
    connection: Connection,
    payment: Payment,
    dispute: Dispute,
    from_state: str | None,
    seen: ProcessorDispute,
    *,
    cause: str,
    actor: str,
    now_us: int,
) -> None:
    """The dispute to `seen.status` with the processor's latest facts, its money, its event."""
    values: dict[str, Any] = {
        "status": seen.status,
        "type": seen.type,
        "fee_minor": seen.fee_minor,
        "evidence_due_by_us": seen.evidence_due_by_us,
        "updated_at_us": now_us,
    }
    values.update(_books(connection, payment, dispute, seen, now_us))
    repository.set_values(connection, dispute.tenant_id, dispute.id, values)
    moved = Dispute(**{**vars(dispute), **values})
    row = audit_rows.event_row(
        moved.tenant_id,
        event_id=ids.new_id("evt"),
        context=audit_rows.EventContext.current(),
        kind="state_change",
        type=states.event_type(from_state, moved.status),
        object_type=OBJECT_TYPE,
        object_id=moved.id,
        from_state=from_state,
        to_state=moved.status,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data={"processor_dispute_id": moved.processor_dispute_id, "withdrawn_minor": moved.withdrawn_minor},
        snapshot=dispute_object(moved),
        sequence=1 if from_state is None else None,
    )
    audit.write(connection, row)


def _books(
    connection: Connection, payment: Payment, dispute: Dispute, seen: ProcessorDispute, now_us: int
) -> dict[str, Any]:
    """The transfers the status reached needs and has not had yet (each at most once)."""
    values: dict[str, Any] = {}
    withdrawn = dispute.withdrawn_minor > 0
    if seen.status in states.CHARGEBACK and not withdrawn:
        values["withdrawal_transfer_id"] = money.withdraw(connection, dispute, payment, seen.fee_minor, now_us=now_us)
        values["withdrawn_minor"] = dispute.amount_minor + seen.fee_minor
        withdrawn = True
    if seen.status == states.WON and withdrawn and dispute.reinstated_minor == 0:
        values["reinstatement_transfer_id"] = money.reinstate(connection, dispute, payment, now_us=now_us)
        values["reinstated_minor"] = dispute.amount_minor
    return values


def load(connection: Connection, tenant_id: str, dispute_id: str) -> Dispute:
    """The tenant's dispute; DisputeNotFound (404) for an unknown one or another tenant's."""
    row = repository.get(connection, tenant_id, dispute_id)
    if row is None:
        raise DisputeNotFound("no such dispute", param="id")
    return dispute_from_row(row)


def get_dispute_json(connection: Connection, tenant_id: str, dispute_id: str) -> dict[str, Any]:
    dispute = load(connection, tenant_id, dispute_id)
    history = audit.events_of(connection, tenant_id, dispute_id, limit=HISTORY_LENGTH_MAX)
    return dispute_json(dispute, history)


def list_disputes(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    payment_id: str | None,
    starting_after: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Newest first. `starting_after` must be a dispute of the tenant."""
    if starting_after is not None and repository.get(connection, tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a dispute of this tenant", param="starting_after")
    rows = repository.page(
        connection, tenant_id, status=status, payment_id=payment_id, starting_after=starting_after, limit=limit
    )
    return [dispute_object(dispute_from_row(row)) for row in rows]


def find_any(connection: Connection, dispute_id: str, *, tenant_id: str | None) -> Dispute | None:
    """The dispute by its id, in `tenant_id` or, with None, in any tenant (the console's)."""
    row = repository.get_any(connection, dispute_id, tenant_id)
    return None if row is None else dispute_from_row(row)


def matching(connection: Connection, column: str, value: str, *, tenant_id: str | None, limit: int) -> list[Dispute]:
    """Up to `limit` disputes whose id or processor's dispute id is `value` (the console's search)."""
    return [dispute_from_row(row) for row in repository.matching(connection, column, value, tenant_id, limit)]


def by_due(
    connection: Connection,
    *,
    tenant_id: str | None,
    statuses: tuple[str, ...],
    after: tuple[int, str, str] | None,
    limit: int,
) -> list[Dispute]:
    """The disputes in `statuses`, the nearest `evidence_due_by` first (the console's queue)."""
    assert statuses and set(statuses) <= set(states.STATUSES), statuses
    rows = repository.by_due(connection, tenant_id, statuses, after=after, limit=limit)
    return [dispute_from_row(row) for row in rows]


def find(connection: Connection, tenant_id: str, processor_dispute_id: str) -> Dispute | None:
    row = repository.by_processor_id(connection, tenant_id, processor_dispute_id, for_update=False)
    return None if row is None else dispute_from_row(row)


# --- the status query (SPEC §6.2: "paycore learns of it by webhook, status query or settlement
# report"): the processor asked for a dispute by its id with no transaction open, its answer
# recorded through `record`, as a webhook's is. Asked by `answers.refresh` (a dispute paycore
# holds), the worker's round over answers whose reply was lost (`in_flight`), and
# reconciliation for a report line naming a dispute paycore does not know: the line never makes
# the dispute, the processor's answer does. What a query comes to: `applied` (made or moved),
# `stale` (nothing new), `unmatched` (a dispute on a payment paycore does not hold: nothing
# recorded), `unknown` (the processor has no such dispute), `no_answer` (proves nothing).

STATUS_QUERY_CAUSE: Final = "status_query"
STATUS_QUERY: Final = "get_dispute"  # the call, as its attempt is recorded

QueryOutcome = Literal["applied", "stale", "unmatched", "unknown", "no_answer"]


def ask_status(
    processor: Processor, processor_dispute_id: str, *, ids: dict[str, str] | None = None
) -> Call[DisputeResult]:
    """The processor's word on the dispute now. Never inside a database transaction."""
    return timed(
        STATUS_QUERY,
        {"dispute_id": processor_dispute_id},
        lambda: processor.get_dispute(processor_dispute_id),
        ids=ids or {"processor_dispute_id": processor_dispute_id},
    )


def apply_status(
    connection: Connection, call: Call[DisputeResult], *, actor: str, now_us: int, about: Dispute | None = None
) -> QueryOutcome:
    """In the caller's transaction: the answer recorded (`record`), and the call on the
    dispute's audit log: `about` (the dispute asked about, when paycore holds it), else the one
    the answer names once recorded (made now, or before)."""
    assert call.operation == STATUS_QUERY, call.operation
    result = call.evidence.result
    outcome: QueryOutcome = "unknown" if call.kind == "not_found" else "no_answer"
    if call.kind == "result" and result is not None:
        recorded = record(connection, seen(result), cause=STATUS_QUERY_CAUSE, actor=actor, now_us=now_us)
        assert recorded in ("applied", "stale", "unmatched"), recorded
        outcome = cast(QueryOutcome, recorded)
    held = about
    if held is None and result is not None:
        held = find(connection, result.merchant_id, result.dispute_id)
    if held is not None:
        record_call(
            connection,
            held.tenant_id,
            object_type=OBJECT_TYPE,
            object_id=held.id,
            call=call,
            attempt=None,
            actor=actor,
            now_us=now_us,
        )
    return outcome


def query_status(database: Database, processor: Processor, processor_dispute_id: str, *, actor: str) -> QueryOutcome:
    """Ask (no transaction open), then apply in one transaction."""
    call = ask_status(processor, processor_dispute_id)
    return database.transaction(lambda connection: apply_status(connection, call, actor=actor, now_us=clock_now_us()))


def seen(result: DisputeResult) -> ProcessorDispute:
    """The processor's dispute as `record` takes it."""
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
