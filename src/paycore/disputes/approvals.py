"""Four eyes on accepting a dispute (docs/operations-console.md).

Accepting a chargeback gives up its amount for good. Above the tenant's approval threshold
(`refund_approval_threshold_minor`, the one threshold of refunds: strictly more than it waits,
exactly it goes) a person's accept is not sent: it is *asked for*, and an approver other than
the one who asked sends it. The rule of the second person is the one of refunds and manual
resolutions, `operators.four_eyes`; the requester is read from the audit log, as a refund's
(`refunds.service.requested_by`).

The request is an audit record, not a row of its own (no migration): `dispute.accept_requested`
(actor: who asked; data: the form's idempotency key, the amount, the threshold), closed by
`dispute.accept_approved` (actor: the approver; data: the request's event id, who asked, the
processor's answer) or `dispute.accept_canceled`. A request is open while neither closed it and
the dispute still takes an answer (`states.OPEN`): a dispute closed by the processor meanwhile
has nothing left to accept. Asking and canceling hold the dispute's row lock, so two people
asking at once on different processes make one request. The approver's accept goes out under
the requester's key (`answers.answer`): approving twice, on any process, is one accept at the
processor; a lost answer leaves the request open, and approving again resends the same request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.disputes import repository, states
from paycore.disputes.errors import AcceptNotRequested, AcceptPending, DisputeNotFound, DisputeNotOpen
from paycore.disputes.schemas import dispute_object
from paycore.disputes.service import OBJECT_TYPE
from paycore.disputes.types import Dispute, dispute_from_row
from paycore.operators import service as operators

REQUESTED: Final = "dispute.accept_requested"
APPROVED: Final = "dispute.accept_approved"
CANCELED: Final = "dispute.accept_canceled"
TYPES: Final = (REQUESTED, APPROVED, CANCELED)
APPROVING: Final = "approving a dispute's accept"


@dataclass(frozen=True)
class AcceptRequest:
    tenant_id: str
    dispute_id: str
    event_id: str  # the `dispute.accept_requested` record
    requested_by: str  # an actor: operator:NAME (or local)
    idempotency_key: str  # the accept's key: the approver sends it under this one
    requested_at_us: int


def needs_approval(amount_minor: int, threshold_minor: int | None) -> bool:
    """The refunds' rule: more than the threshold waits for a second person; None: never."""
    assert amount_minor > 0, amount_minor
    return threshold_minor is not None and amount_minor > threshold_minor


def request(
    connection: Connection, dispute: Dispute, *, key: str, threshold_minor: int, actor: str, now_us: int
) -> AcceptRequest:
    """Ask for the dispute's accept (above the threshold). The same key again is the same
    request (a form sent twice); another while one is open is AcceptPending."""
    operators.require_person(actor, what="asking to accept a dispute")
    locked = _locked(connection, dispute)
    if locked.status not in states.OPEN:
        raise DisputeNotOpen(f"the dispute is {locked.status}: it takes no accept", dispute=dispute_object(locked))
    pending = open_request(connection, locked)
    if pending is not None:
        if pending.idempotency_key == key:
            return pending
        raise AcceptPending(f"{pending.requested_by} already asked to accept it: an approver approves or cancels that")
    data = {
        "idempotency_key": key,
        "amount_minor": locked.amount_minor,
        "currency": locked.currency,
        "threshold_minor": threshold_minor,
    }
    event_id = _note(connection, locked, REQUESTED, "accept_requested", actor, now_us, data)
    made = AcceptRequest(locked.tenant_id, locked.id, event_id, actor, key, now_us)
    assert open_request(connection, locked) == made  # pair: what was written is what is read
    return made


def approver_may(connection: Connection, dispute: Dispute, actor: str) -> AcceptRequest:
    """The open request `actor` may approve: AcceptNotRequested when none is open, SamePerson
    for who asked, OperatorRequired for anyone but a person (`operators.four_eyes`)."""
    pending = open_request(connection, dispute)
    if pending is None:
        raise AcceptNotRequested("no accept of this dispute waits for approval")
    operators.four_eyes(actor, pending.requested_by, what=APPROVING)
    return pending


def approved(
    connection: Connection, dispute: Dispute, pending: AcceptRequest, *, answer_status: int, actor: str, now_us: int
) -> None:
    """Close the request once the processor answered the approver's accept (once: a second
    approver's replay of the same accept records nothing more)."""
    assert pending.dispute_id == dispute.id, (pending, dispute.id)
    locked = _locked(connection, dispute)
    closing = audit.of_types(connection, [(locked.tenant_id, locked.id)], (APPROVED, CANCELED))
    if any(event.data.get("request_event_id") == pending.event_id for event in closing):
        return
    data = {
        "request_event_id": pending.event_id,
        "requested_by": pending.requested_by,
        "approved_by": actor,
        "answer_status": answer_status,
    }
    _note(connection, locked, APPROVED, "accept_approved", actor, now_us, data)


def cancel(connection: Connection, dispute: Dispute, *, actor: str, now_us: int) -> AcceptRequest:
    """Withdraw the open request (the console lets an approver, or who asked, do it)."""
    locked = _locked(connection, dispute)
    pending = open_request(connection, locked)
    if pending is None:
        raise AcceptNotRequested("no accept of this dispute waits for approval")
    data = {"request_event_id": pending.event_id, "requested_by": pending.requested_by}
    _note(connection, locked, CANCELED, "accept_canceled", actor, now_us, data)
    return pending


def open_request(connection: Connection, dispute: Dispute) -> AcceptRequest | None:
    return open_requests(connection, [dispute]).get((dispute.tenant_id, dispute.id))


def open_requests(connection: Connection, disputes: Sequence[Dispute]) -> dict[tuple[str, str], AcceptRequest]:
    """The open request of each dispute that has one (one statement for all of them)."""
    takes_answer = {
        dispute.id: (dispute.tenant_id, dispute.id) for dispute in disputes if dispute.status in states.OPEN
    }
    found: dict[tuple[str, str], AcceptRequest] = {}
    for event in audit.of_types(connection, sorted(takes_answer.values()), TYPES):
        key = takes_answer[event.object_id]
        if event.type == REQUESTED:
            found[key] = _request_of(key, event)
        elif key in found and event.data.get("request_event_id") == found[key].event_id:
            del found[key]
    return found


def _request_of(key: tuple[str, str], event: Event) -> AcceptRequest:
    return AcceptRequest(key[0], key[1], event.id, event.actor, str(event.data["idempotency_key"]), event.created_at_us)


def _locked(connection: Connection, dispute: Dispute) -> Dispute:
    row = repository.get(connection, dispute.tenant_id, dispute.id, for_update=True)
    if row is None:
        raise DisputeNotFound("no such dispute", param="id")
    return dispute_from_row(row)


def _note(
    connection: Connection, dispute: Dispute, type: str, cause: str, actor: str, now_us: int, data: Mapping[str, object]
) -> str:
    return audit.record_other(
        connection,
        dispute.tenant_id,
        kind="note",
        type=type,
        object_type=OBJECT_TYPE,
        object_id=dispute.id,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data={"dispute_status": dispute.status, **data},
    )
