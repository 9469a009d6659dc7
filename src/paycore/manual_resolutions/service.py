"""Manual resolution, maker-checker (ADR 0016). Every function runs in the caller's
transaction.

An item that no evidence will settle (the processor lost it, the bank answers nothing) can be
resolved by hand once it is *eligible*: it waits on the processor (a payment or refund
`processing` or `in_doubt`; a payout `processing`, `in_doubt` or `sent`) and either it has been
`in_doubt` for at least the tenant's manual window (`manual_resolution_after_seconds`, 72 h by
default) or an open reconciliation break names it (a break a run left for a person).

1. A person proposes an outcome (`succeeded` or `failed`) with a written evidence note
   (`propose`). Nothing moves. One proposal per item is open at a time.
2. A different person confirms it (`confirm`) or rejects it (`reject`): four eyes, kept by
   `operators.four_eyes`. Only the confirmation moves the item, through the same transitions
   and ledger effects as the processor's answer would (`Evidence.manual`, cause
   `manual_resolution`), recording both names and the note on the item's change.

If the processor's evidence later contradicts a confirmed outcome, nothing moves backwards: a
`manual_resolution_contradicted` break is opened (`reconciliation.service`, from the webhook or
the settlement report that contradicts it) and counted as an escaped money defect.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from sqlalchemy import Connection

from paycore.kit.errors import InvalidStartingAfter
from paycore.lifecycle import recording
from paycore.lifecycle.evidence import MANUAL_CAUSE, Evidence
from paycore.manual_resolutions import lifecycle, repository, states
from paycore.manual_resolutions.errors import (
    InvalidEvidence,
    InvalidKind,
    InvalidOutcome,
    ItemNotFound,
    NotEligible,
    ResolutionNotProposed,
    ResolutionPending,
)
from paycore.manual_resolutions.models import EVIDENCE_CHARS_MAX
from paycore.manual_resolutions.types import KINDS, OUTCOMES, Kind, Outcome, Resolution, resolution_from_row
from paycore.operators import service as operators
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.reconciliation import service as reconciliation
from paycore.refunds import service as refunds
from paycore.tenants import settings as tenant_settings

NOTE_CHARS_MAX: Final = 1000  # an approver's note on a confirmation or rejection
_DOMAINS: Final[dict[str, ModuleType]] = {"payment": payments, "refund": refunds, "payout": payouts}


@dataclass(frozen=True)
class Eligibility:
    """Whether an item may be resolved by hand now, and why (not)."""

    eligible: bool
    reason: str
    status: str  # the item's status (public name)
    in_doubt_since_us: int | None
    window_s: int  # the tenant's manual window
    open_breaks: tuple[str, ...]  # ids of the open breaks that name the item


def kind_of(raw: str) -> Kind:
    """`payment`, `refund` or `payout` (a path may say `payments`, ...); InvalidKind otherwise."""
    kind = raw[:-1] if raw.endswith("s") else raw
    for known in KINDS:
        if kind == known:
            return known
    raise InvalidKind(f"kind must be one of {', '.join(KINDS)}", param="kind")


def public_status(kind: Kind, item: Any) -> str:
    return str(_DOMAINS[kind].MACHINE.public(item.status))


def waiting(kind: Kind) -> frozenset[str]:
    """The statuses (public names) in which an item of `kind` waits on the processor."""
    found: frozenset[str] = _DOMAINS[kind].MACHINE.waiting
    return found


def load_item(connection: Connection, tenant_id: str, kind: Kind, object_id: str, *, for_update: bool = False) -> Any:
    item = _DOMAINS[kind].MACHINE.find(connection, tenant_id, object_id, for_update=for_update)
    if item is None:
        raise ItemNotFound(f"no such {kind}", param="id")
    return item


def eligibility(connection: Connection, tenant_id: str, kind: Kind, item: Any, *, now_us: int) -> Eligibility:
    status = public_status(kind, item)
    window_s = tenant_settings.get(connection, tenant_id).manual_resolution_after_seconds
    since_us = item.in_doubt_since_us if status == "in_doubt" else None
    breaks = tuple(found.id for found in reconciliation.open_breaks_naming(connection, tenant_id, item.id))

    def verdict(eligible: bool, reason: str) -> Eligibility:
        return Eligibility(eligible, reason, status, since_us, window_s, breaks)

    if status not in waiting(kind):
        return verdict(False, f"the {kind} is {status}: only an item waiting on the processor is resolved by hand")
    if breaks:
        return verdict(True, f"an open reconciliation break names it ({breaks[0]})")
    if since_us is not None and now_us - since_us >= window_s * 1_000_000:
        return verdict(True, f"in doubt for longer than the tenant's manual window ({window_s} s)")
    if since_us is None:
        return verdict(False, f"the {kind} is {status}, not in doubt, and no open reconciliation break names it")
    waited_s = max(0, now_us - since_us) // 1_000_000
    return verdict(False, f"in doubt for {waited_s} s; the tenant's manual window is {window_s} s")


def propose(
    connection: Connection,
    tenant_id: str,
    kind: Kind,
    object_id: str,
    *,
    outcome: str,
    evidence: str,
    actor: str,
    now_us: int,
) -> Resolution:
    """Store a proposal (nothing moves). Refusals: InvalidOutcome, InvalidEvidence, ItemNotFound,
    NotEligible, ResolutionPending (one is open for the item already)."""
    operators.require_person(actor, what="proposing a manual resolution")
    checked_outcome = _outcome(outcome)
    note = _text(evidence, "evidence", EVIDENCE_CHARS_MAX, InvalidEvidence)
    item = load_item(connection, tenant_id, kind, object_id, for_update=True)
    found = eligibility(connection, tenant_id, kind, item, now_us=now_us)
    if not found.eligible:
        raise NotEligible(found.reason, status=found.status)
    if repository.open_proposal(connection, tenant_id, kind, object_id) is not None:
        raise ResolutionPending(f"a manual resolution of this {kind} waits for a second person already")
    resolution = Resolution(
        tenant_id=tenant_id,
        id=repository.new_id(),
        object_type=kind,
        object_id=object_id,
        object_status=found.status,
        outcome=checked_outcome,
        evidence=note,
        status=states.PROPOSED,
        proposed_by=actor,
        decided_by=None,
        decision_note=None,
        created_at_us=now_us,
        updated_at_us=now_us,
        decided_at_us=None,
    )
    data = {"object_type": kind, "object_id": object_id, "outcome": checked_outcome, "evidence": note}
    return recording.create(connection, lifecycle.MACHINE, resolution, cause="proposed", actor=actor, data=data)


def confirm(
    connection: Connection, tenant_id: str, resolution_id: str, *, actor: str, note: str | None, now_us: int
) -> Resolution:
    """A second person confirms: the item moves to the proposed outcome (its ledger effects
    with it), then the proposal is `confirmed`. Refusals: ResolutionNotProposed, SamePerson,
    OperatorRequired, NotEligible (the item was settled meanwhile: reject the proposal)."""
    current = _open(connection, tenant_id, resolution_id)
    operators.four_eyes(actor, current.proposed_by, what="confirming a manual resolution")
    decision_note = None if note is None or not note.strip() else _text(note, "note", NOTE_CHARS_MAX, InvalidEvidence)
    kind = kind_of(current.object_type)
    item = load_item(connection, tenant_id, kind, current.object_id, for_update=True)
    status = public_status(kind, item)
    if status not in waiting(kind):
        raise NotEligible(f"the {kind} is {status} now: nothing to resolve; reject the proposal", status=status)
    people = {"manual_resolution_id": current.id, "proposed_by": current.proposed_by, "confirmed_by": actor}
    applied = _DOMAINS[kind].apply_evidence(
        connection,
        item,
        Evidence.manual(_outcome(current.outcome)),
        cause=MANUAL_CAUSE,
        actor=actor,
        now_us=now_us,
        data={**people, "evidence": current.evidence},
    )
    assert applied.changed, (current.id, applied.reason)  # a waiting item has a path to either outcome
    return _decide(connection, current, states.CONFIRMED, actor=actor, note=decision_note, now_us=now_us)


def reject(
    connection: Connection, tenant_id: str, resolution_id: str, *, actor: str, note: str | None, now_us: int
) -> Resolution:
    """A second person rejects the proposal: nothing moves."""
    current = _open(connection, tenant_id, resolution_id)
    operators.four_eyes(actor, current.proposed_by, what="rejecting a manual resolution")
    decision_note = None if note is None or not note.strip() else _text(note, "note", NOTE_CHARS_MAX, InvalidEvidence)
    return _decide(connection, current, states.REJECTED, actor=actor, note=decision_note, now_us=now_us)


def open_proposal(connection: Connection, tenant_id: str, kind: Kind, object_id: str) -> Resolution:
    """The item's proposal waiting for a second person; ResolutionNotProposed when there is none."""
    row = repository.open_proposal(connection, tenant_id, kind, object_id)
    if row is None:
        raise ResolutionNotProposed(f"no manual resolution of this {kind} waits for a decision", status="none")
    return resolution_from_row(row)


get: Final = lifecycle.MACHINE.load  # the proposal, or ResolutionNotFound


def of_object(connection: Connection, tenant_id: str, object_id: str) -> list[Resolution]:
    """Every proposal about the item, oldest first."""
    return [resolution_from_row(row) for row in repository.of_object(connection, tenant_id, object_id)]


def page(
    connection: Connection,
    *,
    tenant_id: str | None,
    status: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Resolution]:
    """Proposals newest first, over every tenant when `tenant_id` is None."""
    if starting_after is not None and not repository.exists(connection, tenant_id, starting_after):
        raise InvalidStartingAfter("starting_after is not a manual resolution of this list", param="starting_after")
    rows = repository.page(connection, tenant_id=tenant_id, status=status, starting_after=starting_after, limit=limit)
    return [resolution_from_row(row) for row in rows]


def _open(connection: Connection, tenant_id: str, resolution_id: str) -> Resolution:
    current = lifecycle.MACHINE.load(connection, tenant_id, resolution_id, for_update=True)
    if current.status != states.PROPOSED:
        raise ResolutionNotProposed(f"the manual resolution is {current.status} already", status=current.status)
    return current


def _decide(
    connection: Connection, current: Resolution, to_status: str, *, actor: str, note: str | None, now_us: int
) -> Resolution:
    values = {"decided_by": actor, "decided_at_us": now_us, "decision_note": note}
    data = {"object_type": current.object_type, "object_id": current.object_id, "outcome": current.outcome}
    moved = lifecycle.MACHINE.move(
        connection,
        current,
        to_status,
        cause=to_status,
        actor=actor,
        now_us=now_us,
        values=values,
        data={**data, "proposed_by": current.proposed_by, "note": note},
    )
    if not moved.changed:  # another person decided between our read and our update
        raise ResolutionNotProposed(f"the manual resolution is {moved.item.status} already", status=moved.item.status)
    return moved.item


def _outcome(raw: str) -> Outcome:
    for outcome in OUTCOMES:
        if raw == outcome:
            return outcome
    raise InvalidOutcome(f"outcome must be one of {', '.join(OUTCOMES)}", param="outcome")


def _text(raw: str, param: str, chars_max: int, error: type[InvalidEvidence]) -> str:
    text = raw.strip() if isinstance(raw, str) else ""
    if not 0 < len(text) <= chars_max:
        raise error(f"{param} must be 1 to {chars_max} characters (a written note)", param=param)
    return text
