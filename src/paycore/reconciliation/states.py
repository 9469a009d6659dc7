"""A reconciliation break's state machine (ADR 0014): its transition table, the resolutions a
person may give, and the one place a break's status changes.

    open -> resolved     (a person decides, with a resolution: POST /v1/reconciliation/breaks/{id}/resolve)
    open -> superseded   (a corrected report for the same day replaces that day's open breaks;
                          or the run that stored it did not complete: `days.abandon`)

`resolved` and `superseded` are terminal. A break waits on no other system, so it has no
lifecycle `Machine` (no ledger effect, no work columns, no `updated_at_us`), but it changes
status through the lifecycle's one status change (`paycore.lifecycle.transition.change`, as
`Machine.move` does): the transition table, a compare-and-set on the stored status
(`UPDATE ... WHERE status = :from`) and, in the same transaction, its record: one audit event
(`move` below is that call with the break's record). `record_opened` records the event of a
break just stored.

Where the events go: on the object the break names (the payment, refund or payout), so that the
object's events (`GET /v1/payments/{id}/events`, ...) show its breaks; on the break itself when
it names none (`missing_in_paycore`, `malformed_line`, `unknown_account`). They are `note`
events, a finding about the object and not a change of its state (an object's `history` stays
its own state changes),
typed `reconciliation.break_opened`, `reconciliation.break_resolved` and
`reconciliation.break_superseded`, with the break's id, type, from and to in their data.
They are published (ADR 0015): the tenant's webhook endpoints receive them with the break as
it is after the change, numbered by the break (1 when opened, 2 when resolved or superseded).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.lifecycle import transition
from paycore.reconciliation import repository
from paycore.reconciliation.errors import BreakNotOpen
from paycore.reconciliation.models import reconciliation_breaks
from paycore.reconciliation.rendering import break_json
from paycore.reconciliation.types import Break

OPEN: Final = "open"
RESOLVED: Final = "resolved"
SUPERSEDED: Final = "superseded"
STATUSES: Final = (OPEN, RESOLVED, SUPERSEDED)
TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset({(OPEN, RESOLVED), (OPEN, SUPERSEDED)})
TERMINAL: Final = frozenset({RESOLVED, SUPERSEDED})

# What a person says about a break when resolving it (docs/reconciliation.md, "Resolutions"):
#   accepted             the difference is accepted as it is
#   adjusted             corrected by a manual ledger adjustment
#   processor_corrected  the processor corrected its report or its records
#   written_off          the amount is written off as a loss
Resolution = Literal["accepted", "adjusted", "processor_corrected", "written_off"]
RESOLUTIONS: Final[tuple[str, ...]] = get_args(Resolution)
NOTE_CHARS_MAX: Final = 1000  # a resolution's note, in characters

OBJECT_TYPE: Final = "reconciliation_break"  # the events of a break that names no object
EVENT_TYPES: Final = {
    OPEN: "reconciliation.break_opened",
    RESOLVED: "reconciliation.break_resolved",
    SUPERSEDED: "reconciliation.break_superseded",
}
OPENED_CAUSE: Final = "settlement_report"


def allowed(from_status: str, to_status: str) -> bool:
    return (from_status, to_status) in TRANSITIONS


def move(
    connection: Connection,
    current: Break,
    to_status: str,
    *,
    cause: str,
    actor: str,
    now_us: int,
    values: Mapping[str, Any] | None = None,
) -> Break:
    """The one status change of a break: `current` (as read in this transaction) to `to_status`
    with the columns that state sets (`values`), compare-and-set on the status read, then one
    audit event. A break that is not open (now, or by the time the UPDATE runs: another request
    won) is `BreakNotOpen` with its status now. Returns what the UPDATE wrote; nothing is read back."""
    assert to_status in TERMINAL, to_status
    assert not values or "status" not in values
    if not allowed(current.status, to_status):
        raise BreakNotOpen(current.status)
    moved = dataclasses.replace(current, status=to_status, **(values or {}))
    data = {"resolution": moved.resolution, "note": moved.note} if to_status == RESOLVED else {}

    def record(count: int) -> None:
        _record(connection, moved, from_status=current.status, cause=cause, actor=actor, now_us=now_us, data=data)

    key = {"tenant_id": current.tenant_id, "id": current.id}
    step = (current.status, to_status)
    if not transition.change(
        connection, reconciliation_breaks, key, step, transitions=TRANSITIONS, record=record, values=values
    ):
        status_now = repository.break_status(connection, current.tenant_id, current.id)
        assert status_now is not None and status_now != current.status, (current.id, status_now)
        raise BreakNotOpen(status_now)
    return moved


def record_opened(connection: Connection, values: Mapping[str, Any], now_us: int, *, actor: str) -> str:
    """The event of a break just stored (`values`: the row inserted), on the object it names.
    Called by the engine in the transaction that stored the break, only when it was stored."""
    assert values["status"] == OPEN, values["status"]
    opened = Break(**{field.name: values[field.name] for field in dataclasses.fields(Break)})
    data = {"detail": opened.detail, "line_number": opened.line_number, "object_status": opened.object_status}
    return _record(connection, opened, from_status=None, cause=OPENED_CAUSE, actor=actor, now_us=now_us, data=data)


def _record(
    connection: Connection,
    break_: Break,
    *,
    from_status: str | None,
    cause: str,
    actor: str,
    now_us: int,
    data: Mapping[str, Any],
) -> str:
    object_type, object_id = OBJECT_TYPE, break_.id
    if break_.object_type is not None and break_.object_id is not None:
        object_type, object_id = break_.object_type, break_.object_id
    sequence = 1 if from_status is None else 2  # a break changes once at most after its opening
    return audit.record_other(
        connection,
        break_.tenant_id,
        kind="note",
        type=EVENT_TYPES[break_.status],
        object_type=object_type,
        object_id=object_id,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data={
            "break_id": break_.id,
            "break_type": break_.type,
            "from": from_status,
            "to": break_.status,
            "day": break_.day,
            "run_id": break_.run_id,
            **data,
        },
        published=(sequence, break_json(break_)),
    )
