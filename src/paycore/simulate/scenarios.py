"""The scenarios of SPEC §8, three (`*-stuck-in-doubt-reconciled`) where a refund, a payment
or a payout stays `in_doubt` through every resolver attempt and the day's settlement report,
through the real reconciliation, resolves it, four of authorize now, capture later
(SPEC §6.1: `authorizations.py`), two of disputes (SPEC §6.2: `disputes.py`) and a dispute
webhook lost and recovered from the report (`dispute_recovery.py`). Each drives paycore (the
order side) and the sandbox processor (the payment side) through one story;
`invariants.check` then judges the world it leaves."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paycore.simulate.authorizations import (
    authorization_expired,
    cancel_racing_capture,
    cancel_request_lost,
    capture_response_lost,
)
from paycore.simulate.dispute_recovery import dispute_webhook_lost_recovered_from_report
from paycore.simulate.disputes import dispute_lost_by_silence, dispute_won
from paycore.simulate.world import TIMEOUT_MS, World

REFUND_OPS = ["refund"]
CALLBACK_LATE_MS = 1_500
ROUTING_NUMBER = "110000000"  # passes the ABA check
SETTLES = "000123456789"  # the sandbox bank settles it (docs/sandbox.md, "Test accounts")
ACH_FEE_MINOR = 25  # the sandbox bank's fee for an ACH payout
SETTLEMENT_REPORT = "settlement_report"  # the cause of a change the report proved


@dataclass
class Story:
    world: World
    merchant: str = ""

    def pay(
        self, amount_minor: int = 1000, token: str = "tok_ok", key: str | None = None, capture: str = "automatic"
    ) -> str:
        """A payment (`capture` manual: an authorization, SPEC §6.1); returns its id."""
        body: dict[str, Any] = {
            "amount_minor": amount_minor,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": self.merchant,
        }
        if capture != "automatic":
            body["capture"] = capture
        status, payment = self.world.post("/v1/payments", body, key=key or f"pay-{random.getrandbits(40)}")
        assert status in (201, 202, 402), payment
        return str(payment["id"])

    def refund(self, payment_id: str, amount_minor: int, key: str) -> tuple[int, dict[str, Any]]:
        return self.world.post(f"/v1/payments/{payment_id}/refunds", {"amount_minor": amount_minor}, key=key)

    def payout(self, amount_minor: int) -> str:
        """An ACH payout from the merchant's account, due today, to an account that settles."""
        body = {
            "amount_minor": amount_minor,
            "currency": "USD",
            "source_account": self.merchant,
            "rail": "ach",
            "beneficiary": {"name": "Ada Lovelace", "routing_number": ROUTING_NUMBER, "account_number": SETTLES},
        }
        status, payout = self.world.post("/v1/payouts", body, key=f"po-{random.getrandbits(40)}")
        assert status == 201, payout
        return str(payout["id"])

    def refund_status(self, refund_id: str) -> str:
        return self.status("refund", refund_id)

    def status(self, kind: str, object_id: str) -> str:
        return str(self.world.get(f"/v1/{kind}s/{object_id}")["status"])

    def history(self, kind: str, object_id: str) -> list[tuple[str | None, str, str]]:
        """The object's state changes: (from, to, cause)."""
        history = self.world.get(f"/v1/{kind}s/{object_id}")["history"]
        return [(step["from"], step["to"], step["cause"]) for step in history]

    def steps(self, refund_id: str) -> list[tuple[str | None, str]]:
        return [(before, after) for before, after, _ in self.history("refund", refund_id)]

    def at_bank(self, payout_id: str) -> str | None:
        found = self.world.at_processor("payout", payout_id)
        return None if found is None else str(found["status"])

    def expect(self, what: str, actual: object, expected: object) -> None:
        self.world.say("check", f"{what}: {actual!r}" + ("" if actual == expected else f" (expected {expected!r})"))
        if actual != expected:
            raise AssertionError(f"{what}: got {actual!r}, expected {expected!r}")


Scenario = Callable[[Story], None]


def success(story: Story) -> None:
    payment = story.pay(1000)
    _, refund = story.refund(payment, 400, "r1")
    story.world.run_workers()
    story.expect("refund status", story.refund_status(refund["id"]), "succeeded")


def over_refund_rejected(story: Story) -> None:
    payment = story.pay(1000)
    story.expect("first refund", story.refund(payment, 600, "r1")[0], 201)
    status, body = story.refund(payment, 500, "r2")
    story.expect("second refund (600 + 500 > 1000)", (status, body.get("error")), (422, "over_refund"))
    story.world.run_workers()


def unknown_payment_rejected(story: Story) -> None:
    status, body = story.refund("pay_DOESNOTEXIST", 100, "r1")
    story.expect("refund of an unknown payment", (status, body.get("error")), (404, "payment_not_found"))


def declined(story: Story) -> None:
    payment = story.pay(1000, token="tok_refund_declined")
    _, refund = story.refund(payment, 300, "r1")
    story.world.run_workers()
    story.expect("refund status", story.refund_status(refund["id"]), "failed")
    story.expect("refundable again", story.world.get(f"/v1/payments/{payment}")["refundable_minor"], 1000)


def _lost(story: Story, rule: dict[str, Any]) -> None:
    payment = story.pay(1000)
    _, refund = story.refund(payment, 250, "r1")
    story.world.webhooks(up=False)  # else the processor's webhook may settle it first (over HTTP)
    story.world.faults(rule)
    story.world.run_workers(rounds=3)
    story.world.webhooks(up=True)
    steps = story.steps(refund["id"])
    story.expect("the lost answer made it in_doubt", ("processing", "in_doubt") in steps, True)
    story.expect("resolved by evidence", steps[-1], ("in_doubt", "succeeded"))
    story.expect("final status", story.refund_status(refund["id"]), "succeeded")


def request_lost(story: Story) -> None:
    _lost(story, {"fault": "drop_request", "next_n": 1, "ops": REFUND_OPS})


def response_lost(story: Story) -> None:
    _lost(story, {"fault": "drop_response", "next_n": 1, "ops": REFUND_OPS})


def timeout_then_retry(story: Story) -> None:
    _lost(story, {"fault": "delay_ms", "delay_ms": TIMEOUT_MS * 2, "next_n": 1, "ops": REFUND_OPS})


def duplicate_request(story: Story) -> None:
    payment = story.pay(1000)
    first = story.refund(payment, 300, "same-key")
    again = story.refund(payment, 300, "same-key")
    story.expect("the same answer twice", again, first)
    story.world.run_workers()
    story.expect("refunds of the payment", len(story.world.get(f"/v1/payments/{payment}/refunds")["data"]), 1)


def concurrent_refunds(story: Story) -> None:
    payment = story.pay(1000)
    barrier = threading.Barrier(2)
    answers: list[int] = []

    def agent(index: int) -> None:
        barrier.wait()
        answers.append(story.refund(payment, 700, f"agent-{index}")[0])

    threads = [threading.Thread(target=agent, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    story.expect("two agents refund 700 of 1000 at once", sorted(answers), [201, 422])
    story.world.run_workers()


def callback_confirmation(story: Story) -> None:
    payment = story.pay(1000)
    _, refund = story.refund(payment, 500, "r1")
    story.world.webhooks(up=False)  # hold the confirmation back until "pending" has been seen
    # Late enough that the processor (its own process over HTTP) has not settled it when paycore
    # asks in the same worker round; the in-process sandbox settles only when told to.
    story.world.faults({"fault": "settle_late", "next_n": 1, "ops": REFUND_OPS}, settle_late_ms=CALLBACK_LATE_MS)
    story.world.run_workers()
    story.expect("the processor answered pending", story.refund_status(refund["id"]), "processing")
    story.world.faults()
    story.world.webhooks(up=True)
    story.world.settle_and_deliver()
    story.world.wait_for(lambda: story.refund_status(refund["id"]) == "succeeded", "the webhook confirmed it")
    story.expect("after the processor's webhook", story.refund_status(refund["id"]), "succeeded")


def stuck_in_doubt_reconciled(story: Story) -> None:
    """A refund the processor made, whose answer and every status query after it are lost:
    the resolver gives up, and the day's settlement report proves it succeeded."""
    world = story.world
    payment = story.pay(1000)
    _, refund = story.refund(payment, 400, "r1")
    world.webhooks(up=False)  # paycore's webhook endpoint is down: the processor will retry later
    world.faults(
        {"fault": "drop_response", "next_n": 1, "ops": ["refund"]},
        {"fault": "error_500", "percent": 100, "ops": ["get_refund", "refund"]},
    )
    world.run_workers(rounds=world.settings.resolver_attempts_max + 2)
    story.expect("out of attempts, left for a person", story.refund_status(refund["id"]), "in_doubt")
    world.faults()
    _reconciled(story, "refund", refund["id"], "succeeded", lines=2)


def payment_stuck_in_doubt_reconciled(story: Story) -> None:
    """A charge the processor took, whose answer and every status query after it are lost."""
    world = story.world
    world.webhooks(up=False)
    world.faults(
        {"fault": "drop_response", "next_n": 1, "ops": ["charge"]},
        {"fault": "error_500", "percent": 100, "ops": ["get_charge", "charge"]},
    )
    payment = story.pay(1000)
    story.expect("no answer to the charge", story.status("payment", payment), "in_doubt")
    world.run_workers(rounds=world.settings.resolver_attempts_max + 2)
    story.expect("out of attempts, left for a person", story.status("payment", payment), "in_doubt")
    world.faults()
    _reconciled(story, "payment", payment, "succeeded", lines=1)


def payout_stuck_in_doubt_reconciled(story: Story) -> None:
    """A payout the bank took and settled, whose answer and every status query are lost."""
    world = story.world
    story.pay(1000)  # the merchant's balance the payout is paid from
    world.webhooks(up=False)
    world.faults(
        {"fault": "drop_response", "next_n": 1, "ops": ["payout"]},
        {"fault": "error_500", "percent": 100, "ops": ["get_payout"]},
    )
    payout = story.payout(600)
    world.run_workers(rounds=world.settings.resolver_attempts_max + 2)
    story.expect("out of attempts, left for a person", story.status("payout", payout), "in_doubt")
    world.faults()  # the resolver has given up on it: only the driver asks the bank now
    world.wait_for(lambda: story.at_bank(payout) == "settled", "the bank settled the payout")
    steps = _reconciled(story, "payout", payout, "settled", lines=2)
    story.expect("settled through sent", steps[-2:], [("in_doubt", "sent"), ("sent", "settled")])
    fees = [item["amount_minor"] for item in world.get(f"/v1/payouts/{payout}")["adjustments"]]
    story.expect("the bank's fee, from the report's line", fees, [ACH_FEE_MINOR])


def _reconciled(story: Story, kind: str, object_id: str, status: str, *, lines: int) -> list[tuple[str | None, str]]:
    """The world's reports (today's, and yesterday's too if the world lived across midnight),
    through the real reconciliation, resolve the item and break nothing; then paycore's webhook
    endpoint comes back, and what the processor delivers to it changes nothing. Returns the
    item's steps (from, to)."""
    world = story.world
    summaries = world.reconcile()
    counts = tuple(
        sum(getattr(summary, name) for summary in summaries) for name in ("lines_read", "matched", "resolved")
    )
    story.expect("report lines read, matched, resolved", counts, (lines, lines, 1))
    story.expect("new breaks", dict(sum((summary.breaks for summary in summaries), Counter())), {})
    story.expect("after the settlement report", story.status(kind, object_id), status)
    steps = story.history(kind, object_id)
    story.expect("moved by the report", [step[2] for step in steps[-1:]], [SETTLEMENT_REPORT])
    world.webhooks(up=True)
    world.settle_and_deliver()
    story.expect("after the webhooks", story.status(kind, object_id), status)
    return [(step[0], step[1]) for step in steps]


def approval_required(story: Story) -> None:
    story.world.client.put("/v1/settings", json={"refund_approval_threshold_minor": 500})
    story.world.say("driver", "approval threshold set to 500")
    payment = story.pay(1000)
    _, refund = story.refund(payment, 800, "r1")
    story.expect("above the threshold", refund["status"], "requires_approval")
    story.world.run_workers()
    story.expect("not sent before approval", story.refund_status(refund["id"]), "requires_approval")
    story.world.post(f"/v1/refunds/{refund['id']}/approve", {})
    story.world.run_workers()
    story.expect("after approval", story.refund_status(refund["id"]), "succeeded")


SCENARIOS: dict[str, Scenario] = {
    "success": success,
    "over-refund-rejected": over_refund_rejected,
    "unknown-payment-rejected": unknown_payment_rejected,
    "declined": declined,
    "request-lost": request_lost,
    "response-lost": response_lost,
    "timeout-then-retry": timeout_then_retry,
    "duplicate-request": duplicate_request,
    "concurrent-refunds": concurrent_refunds,
    "callback-confirmation": callback_confirmation,
    "stuck-in-doubt-reconciled": stuck_in_doubt_reconciled,
    "payment-stuck-in-doubt-reconciled": payment_stuck_in_doubt_reconciled,
    "payout-stuck-in-doubt-reconciled": payout_stuck_in_doubt_reconciled,
    "approval-required": approval_required,
    "capture-response-lost": capture_response_lost,
    "cancel-request-lost": cancel_request_lost,
    "cancel-racing-capture": cancel_racing_capture,
    "authorization-expired": authorization_expired,
    "dispute-won": dispute_won,
    "dispute-lost-by-silence": dispute_lost_by_silence,
    "dispute-webhook-lost-recovered-from-report": dispute_webhook_lost_recovered_from_report,
}
