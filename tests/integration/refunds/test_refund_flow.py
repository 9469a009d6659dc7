"""Refunds across the network boundary (SPEC §8, §10): the worker sends each refund to the
sandbox processor, through both transports, on both databases; faults make the answer slow,
lost or wrong, and the resolver and webhooks settle it by evidence. One refund at the
processor per refund, whatever happened on the way."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from paycore.kit.signing import sign
from paycore.processor.port import Processor, RefundRequest, RefundResult
from paycore.workers.jobs import WorkerContext, send_refunds
from tests.integration.payments.conftest import TIMEOUT_MS, Env
from tests.integration.refunds import support
from tests.integration.refunds.support import created, paid

REFUND_ONLY = {"ops": ["refund"]}


def at_sandbox(env: Env, refund_id: str) -> Any:
    return env.sandbox.get_refund(refund_id)


def test_worker_sends_and_the_refund_succeeds(env: Env) -> None:
    merchant, payment = paid(env)
    refund = created(env, payment, 300)
    assert support.send(env) == 1
    body = support.get(env, refund["id"])
    assert body["status"] == "succeeded"
    assert body["processor_reference"].startswith("re_")
    assert support.history(env, refund["id"]) == [
        (None, "pending", "refund_requested"),
        ("pending", "processing", "sent"),
        ("processing", "succeeded", "processor_answer"),
    ]
    found = at_sandbox(env, refund["id"])
    assert (found.status, found.amount_minor, found.processor_refund_id) == (
        "succeeded",
        300,
        body["processor_reference"],
    )
    assert support.money(env, merchant) == (700, 0, 700)  # the held amount has left
    assert support.refundable(env, payment) == 700
    assert support.send(env) == 0 and support.resolve(env) == 0
    support.assert_ledger_verifies(env)


def test_a_declined_refund_fails_and_releases_its_amount(env: Env) -> None:
    merchant, payment = paid(env, token="tok_refund_declined")
    refund = created(env, payment, 1000)
    assert support.refundable(env, payment) == 0
    support.send(env)
    body = support.get(env, refund["id"])
    assert (body["status"], body["failure_code"]) == ("failed", "refund_declined")
    assert at_sandbox(env, refund["id"]).status == "failed"
    assert support.refundable(env, payment) == 1000
    assert support.money(env, merchant) == (1000, 0, 1000)
    assert created(env, payment, 1000)["status"] == "pending"  # a failed refund does not count
    support.assert_ledger_verifies(env)


@pytest.mark.parametrize(
    ("rule", "at_sandbox_before_resolution"),
    [
        ({"fault": "drop_request", "next_n": 1}, False),
        ({"fault": "drop_response", "next_n": 1}, True),
        ({"fault": "error_500", "next_n": 1}, False),
        ({"fault": "delay_ms", "delay_ms": TIMEOUT_MS * 2, "next_n": 1}, True),
    ],
    ids=["request_lost", "response_lost", "error_500", "slow_past_timeout"],
)
def test_no_answer_is_in_doubt_then_resolved_to_the_truth(
    env: Env, rule: dict[str, Any], at_sandbox_before_resolution: bool
) -> None:
    merchant, payment = paid(env)
    refund = created(env, payment, 400)
    env.faults({**rule, **REFUND_ONLY})
    assert support.send(env) == 1
    assert support.status_of(env, refund["id"]) == "in_doubt"
    assert (at_sandbox(env, refund["id"]) is not None) == at_sandbox_before_resolution
    assert support.money(env, merchant) == (1000, -400, 600)  # still held: we do not know yet
    assert support.in_doubt_metric(env) == 'paycore_in_doubt_items{kind="refund"} 1.0'
    assert support.refundable(env, payment) == 600

    assert support.resolve(env) == 1
    body = support.get(env, refund["id"])
    assert body["status"] == "succeeded"
    found = at_sandbox(env, refund["id"])
    assert (found.status, found.amount_minor, found.processor_refund_id) == (
        "succeeded",
        400,
        body["processor_reference"],
    )
    assert support.refunds_at_sandbox(env) == 1  # re-sent or not, refunded once
    assert support.history(env, refund["id"])[-2:] == [
        ("processing", "in_doubt", "processor_answer"),
        ("in_doubt", "succeeded", "resolver"),
    ]
    assert support.money(env, merchant) == (600, 0, 600)
    assert support.in_doubt_metric(env) == 'paycore_in_doubt_items{kind="refund"} 0.0'
    assert support.resolve(env) == 0
    support.assert_ledger_verifies(env)


class _Killed(BaseException):
    """Stands for kill -9: nothing in the worker catches it."""


class _DiesDuringRefund:
    """The processor port, with the worker dying during the refund call: before the request
    left, or after the processor did the refund."""

    def __init__(self, inner: Processor, *, after_the_processor: bool) -> None:
        self._inner = inner
        self._after = after_the_processor

    def refund(self, request: RefundRequest) -> RefundResult:
        if self._after:
            self._inner.refund(request)
        raise _Killed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("after_the_processor", [False, True], ids=["before_the_call", "after_the_call"])
def test_a_worker_killed_during_the_call_is_recovered_by_the_resolver(env: Env, after_the_processor: bool) -> None:
    merchant, payment = paid(env)
    refund = created(env, payment, 300)
    dying = _DiesDuringRefund(env.processor, after_the_processor=after_the_processor)
    short_lease = replace(env.settings, claim_lease_ms=1)
    with pytest.raises(_Killed):
        send_refunds(WorkerContext.create(env.database, short_lease, dying))
    assert support.status_of(env, refund["id"]) == "processing"  # marked sent before the call
    assert support.send(env) == 0  # never sent as new again
    assert support.resolve(env) == 1  # the lease lapsed: ask, and re-send the same request if unknown
    assert support.status_of(env, refund["id"]) == "succeeded"
    assert support.refunds_at_sandbox(env) == 1
    assert support.money(env, merchant) == (700, 0, 700)
    support.assert_ledger_verifies(env)


def test_declined_refund_in_doubt_resolves_to_failed(env: Env) -> None:
    merchant, payment = paid(env, token="tok_refund_declined")
    refund = created(env, payment, 500)
    env.faults({"fault": "drop_response", "next_n": 1, **REFUND_ONLY})
    support.send(env)
    assert support.status_of(env, refund["id"]) == "in_doubt"
    support.resolve(env)
    body = support.get(env, refund["id"])
    assert (body["status"], body["failure_code"]) == ("failed", "refund_declined")
    assert support.money(env, merchant) == (1000, 0, 1000)
    assert support.refundable(env, payment) == 1000


def test_processor_unreachable_for_good_stays_in_doubt_for_a_person(env: Env) -> None:
    merchant, payment = paid(env)
    refund = created(env, payment, 200)
    env.faults({"fault": "error_500", "percent": 100, "ops": ["refund", "get_refund"]})
    support.send(env)
    for _ in range(env.settings.resolver_attempts_max + 2):
        support.resolve(env)
    assert support.status_of(env, refund["id"]) == "in_doubt"
    assert at_sandbox(env, refund["id"]) is None
    assert support.in_doubt_metric(env) == 'paycore_in_doubt_items{kind="refund"} 1.0'
    assert 'paycore_in_doubt_oldest_age_seconds{kind="refund"}' in env.client.get("/metrics").text
    calls = support.events(env, refund["id"], "processor_call")
    assert len(calls) == 1 + env.settings.resolver_attempts_max  # the send, then one get_refund per attempt
    assert all(call["data"]["response"]["outcome"] == "unreachable" for call in calls)
    assert support.money(env, merchant) == (1000, -200, 800)  # never guessed: still held

    env.sandbox.clear_fault_plan()
    assert support.resolve(env) == 0  # unscheduled: a person (or a settlement report) decides


def test_pending_answer_then_the_resolver_learns_the_result(env: Env) -> None:
    merchant, payment = paid(env)
    refund = created(env, payment, 300)
    env.faults({"fault": "settle_late", "next_n": 1, **REFUND_ONLY})
    support.send(env)
    assert support.status_of(env, refund["id"]) == "processing"
    assert support.resolve(env) == 1  # asked: still pending at the processor
    assert support.status_of(env, refund["id"]) == "processing"
    env.sandbox.settle_due(now_us=time.time_ns() // 1000 + 10**9)
    assert support.resolve(env) == 1
    assert support.status_of(env, refund["id"]) == "succeeded"
    assert support.money(env, merchant) == (700, 0, 700)


def test_pending_answer_then_a_webhook_confirms(env: Env) -> None:
    merchant, payment = paid(env)
    env.deliver()  # the payment's own webhooks, out of the way
    refund = created(env, payment, 300)
    env.faults({"fault": "settle_late", "next_n": 1, **REFUND_ONLY})
    support.send(env)
    assert support.status_of(env, refund["id"]) == "processing"
    later_us = time.time_ns() // 1000 + 10**9
    assert env.sandbox.settle_due(now_us=later_us) == 1
    assert env.deliver(later_us) == 2  # refund.pending, refund.succeeded
    body = support.get(env, refund["id"])
    assert body["status"] == "succeeded"
    assert body["processor_reference"] == at_sandbox(env, refund["id"]).processor_refund_id
    assert support.history(env, refund["id"])[-1] == ("processing", "succeeded", "webhook")
    webhooks = support.events(env, refund["id"], "webhook")
    assert sorted(hook["cause"] for hook in webhooks) == ["applied", "stale"]  # pending changes nothing
    assert support.money(env, merchant) == (700, 0, 700)
    assert support.resolve(env) == 0  # the webhook settled it; the resolver has nothing to ask


def test_a_duplicated_webhook_applies_once(env: Env) -> None:
    merchant, payment = paid(env)
    env.deliver()
    refund = created(env, payment, 250)
    env.faults(
        {"fault": "duplicate_webhook", "next_n": 1, **REFUND_ONLY},
        {"fault": "drop_response", "next_n": 1, **REFUND_ONLY},
    )
    support.send(env)
    assert support.status_of(env, refund["id"]) == "in_doubt"
    env.deliver()
    env.deliver()
    assert support.status_of(env, refund["id"]) == "succeeded"
    assert [hook["cause"] for hook in support.events(env, refund["id"], "webhook")] == ["applied"]
    changes = [step for step in support.history(env, refund["id"]) if step[1] == "succeeded"]
    assert changes == [("in_doubt", "succeeded", "webhook")]
    assert support.money(env, merchant) == (750, 0, 750)
    assert support.resolve(env) == 0  # settled by the webhook: nothing left to ask
    assert support.refunds_at_sandbox(env) == 1
    support.assert_ledger_verifies(env)


def test_refund_webhooks_that_disagree_are_kept_and_never_applied(env: Env) -> None:
    _, payment = paid(env)
    refund = created(env, payment, 100)
    env.faults({"fault": "drop_response", "next_n": 1, **REFUND_ONLY})
    support.send(env)
    assert support.status_of(env, refund["id"]) == "in_doubt"
    mismatch = _signed_refund_event(env, refund["id"], status="succeeded", amount_minor=99, event_id="evt_sbx_amount")
    assert mismatch.json()["result"] == "mismatch"
    assert support.status_of(env, refund["id"]) == "in_doubt"
    support.resolve(env)
    assert support.status_of(env, refund["id"]) == "succeeded"
    contradiction = _signed_refund_event(env, refund["id"], status="failed", event_id="evt_sbx_contradiction")
    assert contradiction.json()["result"] == "conflict"
    assert support.status_of(env, refund["id"]) == "succeeded"
    causes = [hook["cause"] for hook in support.events(env, refund["id"], "webhook")]
    assert causes == ["mismatch", "conflict"]
    unknown = _signed_refund_event(env, "rf_unknown", status="succeeded", event_id="evt_sbx_unknown")
    assert unknown.json()["result"] == "unmatched"


def test_approval_flow_end_to_end(env: Env) -> None:
    merchant, payment = paid(env)
    env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 500})
    waiting = created(env, payment, 800)
    assert waiting["status"] == "requires_approval"
    assert support.send(env) == 0  # not sent before approval
    assert at_sandbox(env, waiting["id"]) is None
    assert env.client.post(f"/v1/refunds/{waiting['id']}/approve").json()["status"] == "pending"
    assert support.send(env) == 1
    assert support.status_of(env, waiting["id"]) == "succeeded"
    assert at_sandbox(env, waiting["id"]).status == "succeeded"
    assert support.money(env, merchant) == (200, 0, 200)

    env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 0})
    dropped = created(env, payment, 200)
    assert support.money(env, merchant) == (200, -200, 0)
    assert env.client.post(f"/v1/refunds/{dropped['id']}/cancel").json()["status"] == "canceled"
    assert support.money(env, merchant) == (200, 0, 200)  # the hold is voided
    assert support.refundable(env, payment) == 200
    assert support.send(env) == 0
    assert at_sandbox(env, dropped["id"]) is None
    support.assert_ledger_verifies(env)


def _signed_refund_event(env: Env, refund_id: str, *, status: str, event_id: str, amount_minor: int = 100) -> Any:
    event = {
        "id": event_id,
        "type": f"refund.{status}",
        "created_at": "2026-11-29T00:00:00Z",
        "sequence": 2,
        "data": {
            "object": "refund",
            "request_id": refund_id,
            "merchant_id": "default",
            "status": status,
            "amount_minor": amount_minor,
            "currency": "USD",
            "processor_refund_id": "re_test",
            "failure_code": "refund_declined" if status == "failed" else None,
        },
    }
    body = json.dumps(event).encode()
    headers = {"Paycore-Signature": sign(env.settings.processor_webhook_secret, int(time.time()), body)}
    response = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
    assert response.status_code == 200, response.text
    return response
