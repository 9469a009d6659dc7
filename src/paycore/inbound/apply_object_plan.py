"""A webhook that moves a payment, settles a refund or moves a payout, planned for the data plane
(ADR 0026 step 3): pure functions from a verified event and the object it names, as read, to
every row the reference path (`inbound.service.receive`) writes when the event moves the object.

One shape for every such object; what differs is data, a `Planning` per object
(`apply_payment.py`, `apply_refund.py`, `apply_payout.py`): its machine, which events it takes,
the result it reads from them, its settle's one home (`payments.move_plan`,
`refunds.settle_plan`, `payouts.settle_plan`) and the plain case's audit cause.

The case: an event whose object is still waiting on it (`processing` or `in_doubt`), of its
amount and currency. The reference path stores the event, loads the object, applies the evidence
(the compare-and-set, the hold posted or voided, for a refund the ceiling's release on a
failure, the state event), records the event on the object's audit log as `applied`, and marks
the stored event `applied`, tried once, done. The plan holds those rows: the stored event, the
move (the object's settle, with the webhook's cause and the processor as actor), and the audit
event (`audit.webhook_row`).

The plain case has its plan too (`plan_confirm`): the usual one, the other system's synchronous
answer having moved the object first, its webhook only confirms (or a redelivery). The reference
path finds nothing to do and writes two rows: the stored event `stale`, tried once, done, and
the audit event, whose cause the object's `Planning.confirmed_cause` names (a refund's `stale`, a
payout's `no_change`). An object may have a plain case that also writes a note before its audit
event (`Planning.confirmed_note`: a payout's return past its window, the refusal's note, `late`).
Everything else has no plan: the reference path's.

A payment's PostgreSQL function reads the payment itself, under its row lock (migration
`*_inbound_apply_payment.py`): there `plan_call` plans from the event alone, no read before the
call (`Planning.call_move`: the move as far as the event says it; the function makes the rest
from the row and checks it as the object's `settled_status` would).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from paycore.audit.rows import EventContext, webhook_row
from paycore.inbound import receive_plan
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors
from paycore.lifecycle.evidence import Decision, Evidence
from paycore.lifecycle.machine import Machine

APPLIED: Final = "applied"  # what `receive` answers, the stored event's status, the audit event's cause
CAUSE: Final = "webhook"  # the state change's cause, as the reference path (`matching.py`) moves the object


class Item(Protocol):
    """What the shape reads of the object: its ids and its last change's time."""

    @property
    def id(self) -> str: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def updated_at_us(self) -> int: ...


class Moved(Protocol):
    """What the shape reads of an object's planned move (`settle_plan.Move`; a payment's `settle_types.Move`)."""

    @property
    def state_event(self) -> dict[str, Any]: ...


T = TypeVar("T", bound=Item)
M = TypeVar("M", bound=Moved)


@dataclass(frozen=True)
class Planning(Generic[T, M]):
    """What differs between the objects a webhook moves: the data of the one shape."""

    machine: Machine[T]
    takes: Callable[[ProcessorEvent], bool]  # an event the data plane tries for this object
    result_of: Callable[[ProcessorEvent], Any]  # the result the event describes, as the reference path reads it
    settled_status: Callable[[T, Decision], str | None]  # the settle's target, None for the reference path
    # The settle's one home (`settle_plan.plan_move`; a payment's `move_plan`); None where the
    # move's own facts send it to the reference path (a return past its window).
    plan_move: Callable[..., M | None]
    new_ids: Callable[[], Any]  # the move's new ids, made in the reference path's order
    moved: Callable[[M], T]  # the object as the move leaves it
    # The plain case's audit cause for the object as read, or None where it is not plain.
    confirmed_cause: Callable[[ProcessorEvent, T], str | None]
    # A plain case that writes a note before its audit event (a return past its window): from the
    # event, the object as read, the clock, the note's id and the context, the audit cause and
    # the note's row; None where it is not that case. None: no such case.
    confirmed_note: Callable[..., tuple[str, dict[str, Any]] | None] | None = None
    # Further facts of the result the move needs (a settlement's bank fee), by `plan_move`'s names.
    move_facts: Callable[[Any], dict[str, Any]] = lambda result: {}
    # PostgreSQL: the move as far as the event says it (None for the reference path), where the
    # object's function reads the object itself under its lock (a payment's); None: the object
    # is read first, on the call's connection (`plan_apply`).
    call_move: Callable[..., Moved | None] | None = None


@dataclass(frozen=True)
class Plan(Generic[M]):
    webhook: dict[str, Any]  # the stored event as the reference path leaves it (`receive_plan.WEBHOOK_COLUMNS`)
    move: M  # the object's compare-and-set, the hold's resolution, its state event (a refund: the ceiling's release)
    audit_event: dict[str, Any]  # the event on the object's audit log (`audit.webhook_row`)

    @property
    def result(self) -> str:
        return APPLIED


@dataclass(frozen=True)
class Confirmation(Generic[T]):
    """The plain case's rows: the object is already where the event says."""

    webhook: dict[str, Any]  # the stored event, `stale`, tried once, done
    item: T  # as read: the write checks it is still so
    audit_event: dict[str, Any]  # the event on the object's audit log, its cause the object's
    notes: tuple[dict[str, Any], ...] = ()  # written before the audit event (`Planning.confirmed_note`)

    @property
    def result(self) -> str:
        return receive_plan.STALE


def plan_apply(
    planning: Planning[T, M],
    event: ProcessorEvent,
    payload: str,
    item: T,
    *,
    now_us: int,
    new_ids: Any,
    audit_event_id: str,
    context: EventContext,
) -> Plan[M] | None:
    """The rows the reference path writes when `event` (its signed body `payload`) moves `item`
    as read; None for the reference path."""
    if not planning.takes(event) or now_us <= item.updated_at_us:
        return None  # a clock behind the object's last change: `Machine.changes` would move it on
    result = planning.result_of(event)
    if not planning.machine.matches(item, result):
        return None  # a mismatch: the reference path records it
    decision = planning.machine.decide(item.status, Evidence.of_result(result))
    target = planning.settled_status(item, decision)
    if target is None:
        return None
    move = planning.plan_move(
        item,
        target,
        decision,
        cause=CAUSE,
        actor=actors.PROCESSOR,
        now_us=now_us,
        new_ids=new_ids,
        context=context,
        **planning.move_facts(result),
    )
    if move is None:
        return None
    webhook, audit_event = rows(planning, event, payload, (APPLIED, APPLIED), now_us, audit_event_id, context)
    plan = Plan(webhook, move, audit_event)
    check_plan(planning.moved(move), plan)
    return plan


def plan_call(
    planning: Planning[Any, Any],
    event: ProcessorEvent,
    payload: str,
    *,
    now_us: int,
    new_ids: Any,
    audit_event_id: str,
    context: EventContext,
) -> Plan[Any] | None:
    """`plan_apply`'s rows without the object's row, for a function that reads it itself
    (`Planning.call_move`): None for the reference path where the event alone says so; the
    function refuses the objects `plan_apply` would refuse from a read."""
    assert planning.call_move is not None, "an object read before its call is planned by `plan_apply`"
    if not planning.takes(event):
        return None
    move = planning.call_move(
        event,
        planning.result_of(event),
        cause=CAUSE,
        actor=actors.PROCESSOR,
        now_us=now_us,
        new_ids=new_ids,
        context=context,
    )
    if move is None:
        return None
    webhook, audit_event = rows(planning, event, payload, (APPLIED, APPLIED), now_us, audit_event_id, context)
    plan = Plan(webhook, move, audit_event)
    _check_rows(plan)
    return plan


def plan_confirm(
    planning: Planning[T, M],
    event: ProcessorEvent,
    payload: str,
    item: T,
    *,
    now_us: int,
    audit_event_id: str,
    context: EventContext,
    note_event_id: str | None = None,
) -> Confirmation[T] | None:
    """The rows the reference path writes when `event` finds `item` already where it says (or,
    with `Planning.confirmed_note`, refuses it with a note whose id is `note_event_id`, made
    before `audit_event_id`); None for everything else."""
    if not planning.takes(event):
        return None
    notes: tuple[dict[str, Any], ...] = ()
    cause = planning.confirmed_cause(event, item)
    if cause is None and planning.confirmed_note is not None:
        assert note_event_id is not None, "a note's id is made before the audit event's"
        noted = planning.confirmed_note(event, item, now_us=now_us, event_id=note_event_id, context=context)
        if noted is not None:
            cause, notes = noted[0], (noted[1],)
    if cause is None:
        return None
    webhook, audit_event = rows(planning, event, payload, (receive_plan.STALE, cause), now_us, audit_event_id, context)
    assert webhook["status"] == receive_plan.STALE and audit_event["cause"] == cause
    assert audit_event["object_id"] == item.id and audit_event["tenant_id"] == item.tenant_id
    for note in notes:
        assert (note["object_id"], note["tenant_id"], note["created_at_us"]) == (item.id, item.tenant_id, now_us)
        assert note["kind"] == "note" and note["actor"] == audit_event["actor"] and note["id"] < audit_event["id"]
    return Confirmation(webhook, item, audit_event, notes)


def rows(
    planning: Planning[Any, Any],
    event: ProcessorEvent,
    payload: str,
    results: tuple[str, str],
    now_us: int,
    audit_event_id: str,
    context: EventContext,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stored event as `rematch.settle` leaves it (tried once, done, its status the first of
    `results`) and the audit event `matching._record` writes (its cause the second)."""
    data = event.data
    stored, recorded = results
    webhook = {
        "tenant_id": data.merchant_id,
        "event_id": event.id,
        "type": event.type,
        "object_type": data.object,
        "request_id": data.request_id,
        "payload": payload,
        "status": stored,
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": now_us,
        "processed_at_us": now_us,
    }
    audit_event = webhook_row(
        data.merchant_id,
        event_id=audit_event_id,
        context=context,
        object_type=planning.machine.object_type,
        object_id=data.request_id,
        event_type=event.type,
        result=recorded,
        payload={"event_id": event.id, "sequence": event.sequence, "status": data.status},
        now_us=now_us,
    )
    return webhook, audit_event


def check_plan(moved: Item, plan: Plan[Any]) -> None:
    """Pair assertions: the stored event, the state event and the audit event say the same, at
    the same time, of the same object, the object as moved (the move's own are its
    `settle_plan.check_move`'s; a payment's `move_plan.check_move`'s)."""
    _check_rows(plan)
    assert moved.updated_at_us == plan.webhook["created_at_us"]
    assert (moved.id, moved.tenant_id) == (plan.webhook["request_id"], plan.webhook["tenant_id"])


def _check_rows(plan: Plan[Any]) -> None:
    """The stored event, the state event and the audit event say the same, at the same time, of
    the same object."""
    webhook, audit_event, state_event = plan.webhook, plan.audit_event, plan.move.state_event
    assert webhook.keys() == set(receive_plan.WEBHOOK_COLUMNS), webhook.keys() ^ set(receive_plan.WEBHOOK_COLUMNS)
    assert webhook["status"] == audit_event["cause"] == plan.result
    assert (
        webhook["created_at_us"]
        == webhook["processed_at_us"]
        == audit_event["created_at_us"]
        == state_event["created_at_us"]
    )
    assert audit_event["object_id"] == webhook["request_id"] == state_event["object_id"]
    assert audit_event["tenant_id"] == webhook["tenant_id"] == state_event["tenant_id"]
    assert audit_event["actor"] == state_event["actor"] == actors.PROCESSOR
    assert state_event["cause"] == CAUSE and audit_event["type"] == f"webhook.{webhook['type']}"
