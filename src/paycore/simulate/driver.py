"""Run scenarios, print a timeline a person can follow, judge the invariants."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from paycore.audit import service as audit
from paycore.kit.clock import to_rfc3339
from paycore.payments.models import payments
from paycore.payouts.models import payouts
from paycore.refunds.models import refunds
from paycore.simulate import invariants, world
from paycore.simulate.chaos import chaos
from paycore.simulate.scenarios import SCENARIOS, Story

ALL = (*SCENARIOS, "chaos")
KINDS = (("payment", payments), ("refund", refunds), ("payout", payouts))
EVENTS_MAX = 100  # audit events shown per object


@dataclass
class Outcome:
    name: str
    transport: str
    passed: bool
    problems: list[str]
    timeline: list[str]


def run(name: str, transport: str, *, seed: int, ops: int) -> Outcome:
    built = world.build(transport)
    problems: list[str] = []
    try:
        story = Story(built)
        story.merchant = built.merchant()
        if name == "chaos":
            chaos(story, seed=seed, ops=ops)
        else:
            SCENARIOS[name](story)
    except AssertionError as error:
        problems.append(f"scenario: {error}")
    except Exception:
        problems.append("scenario crashed:\n" + traceback.format_exc())
    try:
        problems.extend(invariants.check(built))
        timeline = _timeline(built)
    finally:
        built.close()
    return Outcome(name, transport, not problems, problems, timeline)


def _timeline(built: world.World) -> list[str]:
    """What the world said, then each payment, refund and payout with its audit trail."""
    lines = [f"  +{line.at_ms:>6} ms  {line.actor:<9} {line.text}" for line in built.lines]
    with built.database.read() as connection:
        found = sorted(
            (row.created_at_us, kind, row.tenant_id, row.id)
            for kind, table in KINDS
            for row in connection.execute(select(table.c.created_at_us, table.c.tenant_id, table.c.id))
        )
        trails = {
            (kind, object_id): audit.events_of(connection, tenant_id, object_id, limit=EVENTS_MAX)
            for _, kind, tenant_id, object_id in found
        }
    for (kind, object_id), events in trails.items():
        at_processor = built.at_processor(kind, object_id)
        theirs = "unknown to the processor" if at_processor is None else f"processor: {at_processor['status']}"
        lines.append(f"  {object_id} ({theirs})")
        lines.extend(f"      {to_rfc3339(event.created_at_us)[11:23]}  {_described(event)}" for event in events)
    return lines


def _described(event: audit.Event) -> str:
    """One audit event, for a person following the timeline."""
    if event.kind == "state_change":
        return f"{event.from_state or '-'} -> {event.to_state} ({event.cause}, by {event.actor.split(':')[0]})"
    if event.kind == "processor_call":
        response = event.data.get("response", {})
        said = response.get("status") or response.get("message") or ""
        what = f"paycore -> processor {event.type.removeprefix('processor.')}: "
        return what + f"{response.get('outcome', event.cause)} {said}".rstrip()
    if event.kind == "webhook":
        return f"processor -> paycore {event.type}: {event.cause}"
    if event.kind == "adjustment":
        return f"{event.type} {event.data.get('amount_minor')} (from the {event.cause})"
    return f"{event.type}: {event.cause}"


def run_all(names: list[str], transport: str, *, seed: int, ops: int, show: Callable[[Outcome], None]) -> bool:
    passed = True
    for name in names:
        outcome = run(name, transport, seed=seed, ops=ops)
        show(outcome)
        passed = passed and outcome.passed
    return passed
