"""A payment's settle, planned (ADR 0026 step 3): pure, so tested without a database. That its
rows are the reference path's, written, is tests/integration/payments/test_settle_data_plane.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from paycore.audit.rows import EventContext
from paycore.idempotency.service import KeyScope
from paycore.kit import actors
from paycore.ledger.limits import Totals
from paycore.lifecycle.calls import Call
from paycore.lifecycle.evidence import Evidence
from paycore.payments.accept_plan import NewIds as AcceptIds
from paycore.payments.accept_plan import plan_accept
from paycore.payments.settle_plan import accepted_history, plan_settle
from paycore.payments.settle_types import NewIds, Plan
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import ChargeResult

ACCEPTED_US = 1_700_000_000_000_000
SETTLED_US = ACCEPTED_US + 250_000
IDS = NewIds("evt_call", "evt_state", "txn_post", "ent_d", "ent_c")
NEW = NewPayment(1_250, "USD", "card", "tok_ok", "acct_dest", None, {}, actors.LOCAL)


def accepted() -> Payment:
    scope = KeyScope("acme", "key-1", "f" * 64, now_us=ACCEPTED_US, expires_at_us=None)
    plan = plan_accept(
        scope,
        NEW,
        processing_stale_ms=60_000,
        clearing_account_id="acct_clearing",
        context=EventContext(None, None),
        new_ids=AcceptIds("pay_1", "txn_hold", "acct_new", "ent_hd", "ent_hc", "evt_birth"),
    )
    assert plan is not None
    return plan.payment


def call_of(evidence: Evidence[Any]) -> Call[ChargeResult]:
    return Call("charge", {"request_id": "pay_1"}, evidence, {"outcome": "answered"}, 12)


def answered(status: str, amount_minor: int = 1_250, failure_code: str | None = None) -> Call[ChargeResult]:
    result = ChargeResult("pay_1", status, "ch_1", amount_minor, "USD", failure_code)  # type: ignore[arg-type]
    return call_of(Evidence.of_result(result))


def planned(call: Call[ChargeResult], now_us: int = SETTLED_US) -> Plan | None:
    payment = accepted()
    return plan_settle(
        payment,
        call,
        history=accepted_history(payment, actors.LOCAL),
        actor=actors.LOCAL,
        now_us=now_us,
        new_ids=IDS,
        context=EventContext("req_1", None),
    )


def test_a_success_posts_the_hold_whole_and_answers_201() -> None:
    plan = planned(answered("succeeded"))
    assert plan is not None and plan.post and plan.resolution_kind == "post"
    payment = plan.payment
    assert (payment.status, payment.processor_reference, payment.failure_code) == ("succeeded", "ch_1", None)
    assert (payment.updated_at_us, payment.next_attempt_at_us) == (SETTLED_US, None)
    assert plan.clearing.delta == Totals(1_250, 0, -1_250, 0) and plan.clearing.entries_added == 1
    assert plan.destination.delta == Totals(0, 1_250, 0, -1_250) and plan.destination.entries_added == 1
    assert [(entry.id, entry.direction, entry.amount_minor) for entry in plan.entries] == [
        ("ent_d", "debit", 1_250),
        ("ent_c", "credit", 1_250),
    ]
    assert plan.clearing_code == "processor.clearing.USD"
    body = json.loads(plan.answer.body)
    assert plan.answer.status == 201 and body["status"] == "succeeded"
    assert [(step["from"], step["to"], step["cause"]) for step in body["history"]] == [
        (None, "processing", "api_request"),
        ("processing", "succeeded", "processor_answer"),
    ]


def test_a_decline_voids_the_hold_writes_no_entry_and_answers_402() -> None:
    plan = planned(answered("failed", failure_code="card_declined"))
    assert plan is not None and not plan.post and plan.entries == ()
    assert plan.clearing.delta == Totals(0, 0, -1_250, 0) and plan.clearing.entries_added == 0
    assert plan.destination.delta == Totals(0, 0, 0, -1_250) and plan.destination.entries_added == 0
    assert (plan.payment.status, plan.payment.failure_code) == ("failed", "card_declined")
    assert plan.answer.status == 402 and json.loads(plan.answer.body)["error"] == "card_declined"
    assert json.loads(plan.state_event["data"]) == {"failure_code": "card_declined", "request_id": "req_1"}


def test_the_events_are_the_call_then_the_published_change() -> None:
    plan = planned(answered("succeeded"))
    assert plan is not None
    call, change = plan.call_event, plan.state_event
    assert (call["id"], call["kind"], call["type"], call["cause"]) == (
        "evt_call",
        "processor_call",
        "processor.charge",
        "answered",
    )
    assert json.loads(call["data"]) == {
        "latency_ms": 12,
        "request": {"request_id": "pay_1"},
        "request_id": "req_1",
        "response": {"outcome": "answered"},
    }
    assert (change["id"], change["type"], change["from_state"], change["to_state"]) == (
        "evt_state",
        "payment.succeeded",
        "processing",
        "succeeded",
    )
    assert "object_sequence" not in change, "numbered by its INSERT"
    assert json.loads(change["snapshot"])["status"] == "succeeded"


@pytest.mark.parametrize(
    "call",
    [
        answered("pending"),
        answered("succeeded", amount_minor=1_249),  # not the payment as sent: a person looks
        call_of(Evidence("unreachable")),
        call_of(Evidence("not_found")),
        call_of(Evidence("refused", refusal_code="invalid_request")),
    ],
    ids=["pending", "mismatch", "unreachable", "not_found", "refused"],
)
def test_every_other_answer_is_left_to_the_reference_path(call: Call[ChargeResult]) -> None:
    assert planned(call) is None


def test_a_clock_not_past_the_payments_last_change_is_left_to_the_reference_path() -> None:
    assert planned(answered("succeeded"), now_us=ACCEPTED_US) is None
