"""A payout's cancel (`POST /v1/payouts/{payout_id}/cancel`), planned (ADR 0026 step 3): pure
functions from the payout as read to the rows to write.

In: the request (its key's scope: tenant, key, fingerprint, the clock's `now_us`, the key's
expiry), the payout as read before the write and its events (what `service.history` reads),
who asked (the actor) and caused the event (the request id), the new ids, and how the answer
is encoded. Out: a `Plan` holding every row the reference path (`service.cancel` inside
`idempotency.run`) writes for a payout it cancels: the key with its answer (200), the payout's
columns the move writes (`Machine.changes`, the one home of them), the hold's void (a
resolution transfer; each of the hold's two accounts has its pending total released, no
entry), the state event with its snapshot, and the answer: the payout's JSON, its history the
events read plus the planned one, never read back.

The target state is the one transition table's (`states.allowed`); a payout it does not allow
to be canceled (one a worker claimed, one canceled already: the reference path answers it
unchanged, or the 409 with its current status) is not planned, nor a missing one. The write
moves the payout only if it is still what was read (its status, `updated_at_us` and attempts:
all the snapshot's facts a scheduled or queued payout can change), else it writes nothing and
the reference path decides, as for the worker's claim winning the race.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paycore.audit.rows import EventContext
from paycore.audit.service import Event
from paycore.idempotency.service import KeyScope, Outcome
from paycore.lifecycle import recording
from paycore.lifecycle.machine import replaced
from paycore.payouts import lifecycle, schemas, states
from paycore.payouts.service import HISTORY_LENGTH_MAX as HISTORY_LENGTH_MAX  # the answer's history
from paycore.payouts.types import Payout

CAUSE = lifecycle.CANCEL_CAUSE  # the cause of the state event, `service.cancel`'s
STATUS_OK = 200
Encode = Callable[[Any], str]  # the answer's JSON, as the HTTP layer encodes it (http.errors.dumps)


@dataclass(frozen=True)
class NewIds:
    void_transfer_id: str
    event_id: str


@dataclass(frozen=True)
class Plan:
    before: Payout  # as read: the write moves it only if it is still this
    payout: Payout  # as the move leaves it
    changes: dict[str, Any]  # the columns the move writes (`Machine.changes`)
    answer: Outcome  # the 200 and its body: stored with the key, and answered
    key_row: dict[str, Any]
    void_row: dict[str, Any]  # the hold's resolution transfer
    event_row: dict[str, Any]  # the state event, published (its snapshot); numbered by the INSERT

    @property
    def tenant_id(self) -> str:
        return self.payout.tenant_id

    @property
    def now_us(self) -> int:
        return self.payout.updated_at_us


def target(status: str) -> str | None:
    """Where a cancel takes a payout in `status`, or None: the transition table decides."""
    return states.CANCELED if states.allowed(status, states.CANCELED) else None


def void_row(payout: Payout, void_transfer_id: str, now_us: int) -> dict[str, Any]:
    """The hold's void, as `ledger.settle_pending(post=False)` inserts it for the payout's hold
    (`create_plan.hold_spec`: reference type `payout`, the payout its reference and owner)."""
    return {
        "tenant_id": payout.tenant_id,
        "id": void_transfer_id,
        "kind": "void",
        "pending_id": payout.transfer_id,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": "payout",
        "reference_id": payout.id,
        "owner_id": payout.id,
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": now_us,
    }


def plan_cancel(
    scope: KeyScope,
    before: Payout | None,
    events: Sequence[Event],
    *,
    actor: str,
    context: EventContext,
    new_ids: NewIds,
    encode: Encode,
) -> Plan | None:
    """The rows of one payout's cancel and its answer, or None for a cancel the reference path
    must answer (no such payout, one the table does not let be canceled, a long history)."""
    # The reference path's history is the payout's first HISTORY_LENGTH_MAX events: with as many
    # read, the planned event might not be among them.
    if before is None or len(events) >= HISTORY_LENGTH_MAX:
        return None
    to_state = target(before.status)
    if to_state is None:
        return None
    changes = lifecycle.MACHINE.changes(before, to_state, scope.now_us)
    payout = replaced(before, changes)
    now_us = payout.updated_at_us
    event = recording.event_row(
        lifecycle.MACHINE,
        payout,
        before.status,
        cause=CAUSE,
        actor=actor,
        now_us=now_us,
        data=None,
        event_id=new_ids.event_id,
        context=context,
    )
    history = sorted([*events, _event(event)], key=lambda found: (found.created_at_us, found.id))
    answer = Outcome(STATUS_OK, encode(schemas.payout_json(payout, [e for e in history if e.kind == "state_change"])))
    plan = Plan(
        before=before,
        payout=payout,
        changes=changes,
        answer=answer,
        key_row=scope.row(answer),
        void_row=void_row(payout, new_ids.void_transfer_id, now_us),
        event_row=event,
    )
    _check_plan(plan)
    return plan


def _event(row: dict[str, Any]) -> Event:
    """The state event as the answer's history shows it (what `service.history` reads back)."""
    return Event(
        id=row["id"],
        kind=row["kind"],
        type=row["type"],
        object_type=row["object_type"],
        object_id=row["object_id"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        cause=row["cause"],
        actor=row["actor"],
        data=json.loads(row["data"]),
        created_at_us=row["created_at_us"],
    )


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the move is the table's, later than the payout's last change; every row
    names the payout and its hold; the key holds the answer."""
    before, payout, event = plan.before, plan.payout, plan.event_row
    assert states.allowed(before.status, payout.status) and payout.status == states.CANCELED
    assert payout.updated_at_us > before.updated_at_us, "a change is never recorded as earlier than the last"
    assert (payout.id, payout.transfer_id, payout.amount_minor) == (before.id, before.transfer_id, before.amount_minor)
    assert plan.void_row["pending_id"] == payout.transfer_id and plan.void_row["owner_id"] == payout.id
    assert event["object_id"] == payout.id and event["kind"] == "state_change" and "snapshot" in event
    assert "object_sequence" not in event, "numbered after the payout's last by the INSERT, as audit.write does"
    assert event["created_at_us"] == plan.void_row["created_at_us"] == plan.now_us
    assert plan.key_row["response_status"] == plan.answer.status == STATUS_OK
    assert plan.key_row["expires_at_us"] is not None, "a cancel's key expires (keep_forever=False)"
