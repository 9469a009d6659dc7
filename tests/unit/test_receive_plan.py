"""The processor's webhook's receive, planned (ADR 0026 step 3): pure, so tested without a
database. That its rows are the reference path's, written, is
tests/integration/inbound/test_receive_data_plane.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from paycore.audit.rows import EventContext
from paycore.inbound.receive_plan import PLAIN_TYPES, WEBHOOK_COLUMNS, plain_status, plan_receive
from paycore.inbound.schemas import ProcessorEvent
from paycore.kit import actors

NOW_US = 1_700_000_000_000_000


def event(**changed: Any) -> ProcessorEvent:
    data = {
        "object": "charge",
        "request_id": "pay_1",
        "merchant_id": "acme",
        "status": "succeeded",
        "amount_minor": 1_250,
        "currency": "USD",
        "processor_charge_id": "ch_1",
        **changed.pop("data", {}),
    }
    document = {"id": "evt_p1", "type": "charge.succeeded", "created_at": "", "sequence": 3, "data": data, **changed}
    return ProcessorEvent.model_validate(document)


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_a_plain_charge_event_is_planned_as_the_reference_path_leaves_it(status: str) -> None:
    plain = event(type=f"charge.{status}", data={"status": status})
    plan = plan_receive(
        plain, '{"raw": true}', now_us=NOW_US, audit_event_id="evt_a1", context=EventContext("req_1", None)
    )
    assert plan is not None
    assert (plan.payment_id, plan.payment_status, plan.amount_minor, plan.currency) == ("pay_1", status, 1_250, "USD")
    assert plan.result == "stale"
    assert list(plan.webhook) == list(WEBHOOK_COLUMNS)
    assert plan.webhook == {
        "tenant_id": "acme",
        "event_id": "evt_p1",
        "type": f"charge.{status}",
        "object_type": "charge",
        "request_id": "pay_1",
        "payload": '{"raw": true}',
        "status": "stale",
        "attempts": 1,
        "next_attempt_at_us": None,
        "created_at_us": NOW_US,
        "processed_at_us": NOW_US,
    }
    audit = plan.audit_event
    assert {key: audit[key] for key in audit if key != "data"} == {
        "tenant_id": "acme",
        "id": "evt_a1",
        "kind": "webhook",
        "type": f"webhook.charge.{status}",
        "object_type": "payment",
        "object_id": "pay_1",
        "from_state": None,
        "to_state": None,
        "cause": "stale",
        "actor": actors.PROCESSOR,
        "created_at_us": NOW_US,
    }
    assert json.loads(audit["data"]) == {"event_id": "evt_p1", "sequence": 3, "status": status, "request_id": "req_1"}


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        ("a pending charge", {"type": "charge.pending", "data": {"status": "pending"}}),
        ("a type its status does not say", {"data": {"status": "failed"}}),
        ("a refund's event", {"type": "refund.succeeded", "data": {"object": "refund"}}),
        ("a charge event that names a refund", {"data": {"object": "refund"}}),
        ("a capture's type (issue 40)", {"type": "charge.captured"}),
        ("an unknown type", {"type": "charge.disputed"}),
    ],
)
def test_every_other_event_has_no_plan(name: str, changed: dict[str, Any]) -> None:
    other = event(**changed)
    assert plain_status(other) is None, name
    assert plan_receive(other, "{}", now_us=NOW_US, audit_event_id="evt_a1", context=EventContext(None, None)) is None


def test_the_plain_types_prove_terminal_statuses_only() -> None:
    assert PLAIN_TYPES == {"charge.succeeded": "succeeded", "charge.failed": "failed"}
