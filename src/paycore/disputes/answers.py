"""A tenant's answers to a dispute (SPEC §6.2): evidence, or accepting it. Each goes out as a
charge does: read, call the processor outside any transaction, commit.

1. A read: the key's recorded answer is replayed; an unknown dispute (or another tenant's) is
   404 and records nothing.
2. The processor is called with no transaction open, with a request id derived from the dispute,
   the answer's kind and the key (`request_id`): a retry with the same key is the same request,
   which the processor dedupes, so an answer is given once however often it is sent.
3. One transaction claims the key and applies the processor's answer through
   `service.record` (the one transition table, the audit's state change, `dispute.updated` /
   `dispute.closed`), so the key is recorded with the state change it caused. The processor is
   the arbiter of a race: of an evidence and an accept sent together on any processes, it takes
   one and refuses the other `dispute_not_open`, which is recorded as 409 with the dispute as
   paycore holds it. A dispute paycore holds closed is asked too: a retry of a request whose
   answer was lost is answered by the processor's replay (200), never refused by paycore's
   own later news.

A lost answer (timeout, dropped response) proves nothing: 202 with the dispute as paycore holds
it, nothing recorded under the key, the call in the audit log. Evidence ends it: the
processor's dispute webhooks, `refresh` (a status query), or a retry with the same key (the same
request id: the processor answers with the dispute as it is now).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.disputes import in_flight, service
from paycore.disputes.errors import DisputeNotOpen
from paycore.disputes.schemas import dispute_object
from paycore.disputes.types import Dispute
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyReused
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.errors import DomainError
from paycore.lifecycle.calls import Call, timed
from paycore.lifecycle.calls import record as record_call
from paycore.processor.port import AcceptRequest, DisputeResult, EvidenceRequest, Processor

EVIDENCE: Final = "evidence"
ACCEPT: Final = "accept"
CAUSE: Final = "api_request"
REQUEST_ID_PREFIX: Final = "dpa_"
REQUEST_ID_REUSED: Final = "request_id_reused"  # the processor's code (paycore.processor.port)


@dataclass(frozen=True)
class Answer:
    """What the tenant answers: `evidence` (with its text and metadata) or `accept`."""

    kind: str
    text: str | None = None
    metadata: dict[str, str] | None = None


def request_id(dispute: Dispute, kind: str, key: str) -> str:
    """The answer's stable request id: the same dispute, kind and key give the same id."""
    digest = hashlib.sha256(f"{dispute.tenant_id}\n{dispute.id}\n{kind}\n{key}".encode()).hexdigest()
    return REQUEST_ID_PREFIX + digest[:40]


Render = Callable[[DomainError], Outcome]


def answer(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    dispute_id: str,
    given: Answer,
    *,
    actor: str,
    render_refusal: Render,
) -> tuple[Outcome, bool]:
    """Submit evidence or accept the dispute. Returns (response, replayed)."""
    with database.read() as connection:
        replay = idempotency.answered(connection, scope)
        if replay is not None:
            return replay, True
        dispute = service.load(connection, scope.tenant_id, dispute_id)  # 404 records nothing
    # Sent whatever paycore holds: the processor replays this key's request if it arrived
    # before (its answer was lost), and refuses any other when the dispute is not open.
    call = _send(processor, dispute, given, scope.key)
    return database.transaction(lambda connection: _finish(connection, scope, dispute, call, actor, render_refusal))


def refresh(database: Database, processor: Processor, dispute: Dispute, *, actor: str) -> str:
    """A status query of a dispute paycore holds (`service.query_status`'s two halves): what the
    processor says of it now, applied through `service.record`, the call on its audit log.
    Returns `applied`, `stale`, or `no_answer` when the query itself got none."""
    ids = {"dispute_id": dispute.id, "tenant_id": dispute.tenant_id}
    call = service.ask_status(processor, dispute.processor_dispute_id, ids=ids)

    def apply(connection: Connection) -> str:
        return service.apply_status(connection, call, actor=actor, now_us=clock_now_us(), about=dispute)

    return database.transaction(apply)


def _send(processor: Processor, dispute: Dispute, given: Answer, key: str) -> Call[DisputeResult]:
    rid = request_id(dispute, given.kind, key)
    fields: dict[str, Any] = {"request_id": rid, "dispute_id": dispute.processor_dispute_id}
    ids = {"dispute_id": dispute.id, "tenant_id": dispute.tenant_id}
    if given.kind == EVIDENCE:
        assert given.text is not None
        evidence = EvidenceRequest(rid, dispute.tenant_id, dispute.processor_dispute_id, given.text)
        fields.update(text_length=len(given.text), metadata=given.metadata or {})
        return timed("submit_evidence", fields, lambda: processor.submit_evidence(evidence), ids=ids)
    accept = AcceptRequest(rid, dispute.tenant_id, dispute.processor_dispute_id)
    return timed("accept_dispute", fields, lambda: processor.accept_dispute(accept), ids=ids)


def _finish(
    connection: Connection,
    scope: KeyScope,
    dispute: Dispute,
    call: Call[DisputeResult],
    actor: str,
    render_refusal: Render,
) -> tuple[Outcome, bool]:
    """Step 3: the call recorded; the processor's answer applied and recorded under the key."""
    now = clock_now_us()
    _record_call(connection, dispute, call, actor, now)
    result = call.evidence.result
    if call.kind == "result" and result is not None:
        service.record(connection, service.seen(result), cause=CAUSE, actor=actor, now_us=now)
        return idempotency.record_refusal(connection, scope, Outcome(200, _body(connection, dispute)))
    if call.kind == "refused" and call.evidence.refusal_code == REQUEST_ID_REUSED:
        # A key whose answer was lost, sent again with another body: the processor holds the
        # first. Nothing is recorded (the transaction rolls back), as for any reused key.
        raise IdempotencyKeyReused(
            "this idempotency key was already used with a different request", param="idempotency_key"
        )
    if call.kind == "refused":
        # `dispute_not_open` (another answer or the deadline came first), or its like: the
        # processor did nothing. Recorded, so a retry with the key is not sent again.
        refusal = _not_open(service.load(connection, dispute.tenant_id, dispute.id), render_refusal)
        return idempotency.record_refusal(connection, scope, refusal)
    # No usable answer: the call proves nothing. 202, the key left free (a retry resends the
    # same request id); the webhooks, the worker's status query (`in_flight`), `refresh` or
    # that retry settle the dispute.
    kind = EVIDENCE if call.operation == "submit_evidence" else ACCEPT
    in_flight.keep(connection, dispute, kind=kind, request_id=str(call.request["request_id"]), now_us=now)
    return Outcome(202, _body(connection, dispute)), False


def _body(connection: Connection, dispute: Dispute) -> str:
    return json.dumps(service.get_dispute_json(connection, dispute.tenant_id, dispute.id))


def _not_open(dispute: Dispute, render_refusal: Render) -> Outcome:
    return render_refusal(
        DisputeNotOpen(
            f"the dispute is {dispute.status}: only a dispute in needs_response or warning_needs_response "
            "(without evidence yet) takes evidence or an accept",
            dispute=dispute_object(dispute),
        )
    )


def _record_call(connection: Connection, dispute: Dispute, call: Call[Any], actor: str, now_us: int) -> None:
    record_call(
        connection,
        dispute.tenant_id,
        object_type=service.OBJECT_TYPE,
        object_id=dispute.id,
        call=call,
        attempt=None,
        actor=actor,
        now_us=now_us,
    )
