"""Run scenarios, print a timeline a person can follow, judge the invariants."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from paycore.audit import service as audit
from paycore.kit.clock import to_rfc3339
from paycore.refunds.models import refunds
from paycore.simulate import invariants, world
from paycore.simulate.chaos import chaos
from paycore.simulate.scenarios import SCENARIOS, Story

ALL = (*SCENARIOS, "chaos")


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
    lines = [f"  +{line.at_ms:>6} ms  {line.actor:<9} {line.text}" for line in built.lines]
    with built.database.read() as connection:
        rows = list(connection.execute(select(refunds.c.tenant_id, refunds.c.id).order_by(refunds.c.created_at_us)))
        trails = {row.id: audit.events_of(connection, row.tenant_id, row.id, limit=100) for row in rows}
    for refund_id, events in trails.items():
        at_processor = built.processor_refund(refund_id)
        theirs = "unknown to the processor" if at_processor is None else f"processor: {at_processor['status']}"
        lines.append(f"  {refund_id} ({theirs})")
        for event in events:
            if event.kind == "state_change":
                what = f"{event.from_state or '-'} -> {event.to_state} ({event.cause}, by {event.actor.split(':')[0]})"
            else:
                response = event.data.get("response", {})
                said = response.get("status") or response.get("message") or ""
                what = f"paycore -> processor {event.type.removeprefix('processor.')}: "
                what += f"{response.get('outcome', event.cause)} {said}".rstrip()
            lines.append(f"      {to_rfc3339(event.created_at_us)[11:23]}  {what}")
    return lines


def run_all(names: list[str], transport: str, *, seed: int, ops: int, show: Callable[[Outcome], None]) -> bool:
    passed = True
    for name in names:
        outcome = run(name, transport, seed=seed, ops=ops)
        show(outcome)
        passed = passed and outcome.passed
    return passed
