"""The authorize-now-capture-later scenarios (SPEC §6.1): a capture whose answer is
lost and a cancel that never arrives, each left `in_doubt` and resolved by the processor's word
(the resolver's status query); a cancel racing a capture, where exactly one wins and money
moves once; and an authorization that expires, canceled on the processor's word (its
`charge.expired` webhook), never on paycore's clock. `invariants.check` then judges the world
each leaves: the two sides agree on every authorization, no charge was closed twice, and the
ledger verifies (an open authorization a pending hold, a captured one posted for what was
captured, a canceled one voided)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from paycore.kit import clock

if TYPE_CHECKING:
    from paycore.simulate.scenarios import Story

AUTHORIZED_MINOR = 1000
CAPTURED_MINOR = 600  # a partial capture: the other 400 is released
RACE_ROUNDS = 3
RACE_TIMEOUT_S = 30
EXPIRY_MARGIN_US = 200_000  # past the processor's expiry by this much before the workers run
EXPIRY_WAIT_US_MAX = 10_000_000  # tok_expires_quickly lives 2 s


def capture_response_lost(story: Story) -> None:
    """The processor captures 600 of 1000 and the answer is lost: `in_doubt` (capture), nothing
    posted; the resolver's status query proves the capture, 600 is posted once, 400 released."""
    world = story.world
    payment = authorize(story)
    world.webhooks(up=False)  # else the processor's charge.captured may settle it first (over HTTP)
    world.faults({"fault": "drop_response", "next_n": 1, "ops": ["capture"]})
    status, body = capture(story, payment, CAPTURED_MINOR, "capture-1")
    story.expect(
        "no answer to the capture", (status, body["status"], body["in_doubt_operation"]), (202, "in_doubt", "capture")
    )
    story.expect("nothing posted while in doubt: posted, pending", money(story), (0, AUTHORIZED_MINOR))
    world.run_workers(rounds=3)
    story.expect("resolved by evidence", story.history("payment", payment)[-1], ("in_doubt", "succeeded", "resolver"))
    paid = world.get(f"/v1/payments/{payment}")
    amounts = (paid["status"], paid["amount_captured_minor"], paid["amount_capturable_minor"])
    story.expect("captured, the rest released", amounts, ("succeeded", CAPTURED_MINOR, 0))
    story.expect("posted once: posted, pending", money(story), (CAPTURED_MINOR, 0))
    _processor_says(story, payment, "captured")
    world.webhooks(up=True)
    world.settle_and_deliver()  # the processor's charge.captured, late: it changes nothing
    story.expect("after the webhook: posted, pending", money(story), (CAPTURED_MINOR, 0))


def cancel_request_lost(story: Story) -> None:
    """The cancel never reaches the processor: `in_doubt` (cancel); the resolver finds the
    charge still authorized, sends the same cancel again (its stable request id), and the
    processor's answer cancels it: the hold is voided."""
    world = story.world
    payment = authorize(story)
    world.webhooks(up=False)
    world.faults({"fault": "drop_request", "next_n": 1, "ops": ["cancel"]})
    status, body = cancel(story, payment, "cancel-1")
    story.expect(
        "no answer to the cancel", (status, body["status"], body["in_doubt_operation"]), (202, "in_doubt", "cancel")
    )
    world.run_workers(rounds=3)
    story.expect("resolved by evidence", story.history("payment", payment)[-1], ("in_doubt", "canceled", "resolver"))
    paid = world.get(f"/v1/payments/{payment}")
    story.expect("canceled as asked", (paid["status"], paid["cancellation_reason"]), ("canceled", "requested"))
    story.expect("the hold voided: posted, pending", money(story), (0, 0))
    _processor_says(story, payment, "canceled")
    world.webhooks(up=True)
    world.settle_and_deliver()


def cancel_racing_capture(story: Story) -> None:
    """A capture and a cancel of one authorization sent at once, a few times: exactly one wins
    (200), the other is 409 with the payment as the winner left it, and money moves once."""
    posted_minor = 0
    for round_ in range(RACE_ROUNDS):
        payment = authorize(story)
        answers = _race(story, payment, round_)
        codes = {operation: status for operation, (status, _) in answers.items()}
        story.expect("one wins, the other is refused", sorted(codes.values()), [200, 409])
        winner = "capture" if codes["capture"] == 200 else "cancel"
        loser_error = {"capture": "payment_not_cancelable", "cancel": "payment_not_capturable"}[winner]
        story.expect(
            "the loser's refusal", answers["cancel" if winner == "capture" else "capture"][1].get("error"), loser_error
        )
        paid = story.world.get(f"/v1/payments/{payment}")
        won = ("succeeded", AUTHORIZED_MINOR) if winner == "capture" else ("canceled", 0)
        story.expect(f"the {winner} won", (paid["status"], paid["amount_captured_minor"]), won)
        _processor_says(story, payment, "captured" if winner == "capture" else "canceled")
        posted_minor += won[1]
        story.expect("money moved once: posted, pending", money(story), (posted_minor, 0))


def authorization_expired(story: Story) -> None:
    """A `tok_expires_quickly` authorization (2 s) nobody captures: past its expiry paycore's
    clock alone changes nothing; the processor's `charge.expired` cancels it (`expired`) and
    releases the hold; a capture after that is 409."""
    world = story.world
    world.webhooks(up=False)  # the processor's word held back until paycore's clock has passed
    payment = authorize(story, token="tok_expires_quickly")
    expires_at_us = clock.parse_rfc3339(world.get(f"/v1/payments/{payment}")["authorization_expires_at"])
    _sleep_until(expires_at_us + EXPIRY_MARGIN_US)
    world.say("driver", "waited past authorization_expires_at")
    world.run_workers(rounds=2)
    story.expect("paycore's clock alone changes nothing", story.status("payment", payment), "requires_capture")
    world.webhooks(up=True)
    world.wait_for(lambda: story.status("payment", payment) == "canceled", "the processor's charge.expired")
    paid = world.get(f"/v1/payments/{payment}")
    said = (paid["status"], paid["cancellation_reason"], paid["amount_capturable_minor"])
    story.expect("canceled on the processor's word", said, ("canceled", "expired", 0))
    story.expect("by its webhook", story.history("payment", payment)[-1], ("requires_capture", "canceled", "webhook"))
    story.expect("the hold released: posted, pending", money(story), (0, 0))
    status, body = capture(story, payment, None, "capture-late")
    story.expect("a capture after the expiry", (status, body.get("error")), (409, "payment_not_capturable"))
    _processor_says(story, payment, "expired")


def authorize(story: Story, token: str = "tok_ok") -> str:
    payment = story.pay(AUTHORIZED_MINOR, token=token, capture="manual")
    story.expect("authorized", story.status("payment", payment), "requires_capture")
    return payment


def capture(story: Story, payment_id: str, amount_minor: int | None, key: str) -> tuple[int, dict[str, Any]]:
    body = {} if amount_minor is None else {"amount_minor": amount_minor}
    return story.world.post(f"/v1/payments/{payment_id}/capture", body, key=key)


def cancel(story: Story, payment_id: str, key: str) -> tuple[int, dict[str, Any]]:
    return story.world.post(f"/v1/payments/{payment_id}/cancel", {}, key=key)


def money(story: Story) -> tuple[int, int]:
    """The merchant's (posted, pending), in minor units."""
    balance = story.world.get(f"/v1/accounts/{story.merchant}/balance")
    return int(balance["posted_minor"]), int(balance["pending_minor"])


def _race(story: Story, payment_id: str, round_: int) -> dict[str, tuple[int, dict[str, Any]]]:
    barrier = threading.Barrier(2)
    answers: dict[str, tuple[int, dict[str, Any]]] = {}

    def send(operation: str) -> None:
        barrier.wait(RACE_TIMEOUT_S)
        key = f"{operation}-{round_}"
        answers[operation] = (
            capture(story, payment_id, None, key) if operation == "capture" else cancel(story, payment_id, key)
        )

    threads = [threading.Thread(target=send, args=(operation,)) for operation in ("capture", "cancel")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_TIMEOUT_S)
    assert sorted(answers) == ["cancel", "capture"], f"a racer gave no answer: {answers}"
    return answers


def _processor_says(story: Story, payment_id: str, status: str) -> None:
    found = story.world.at_processor("payment", payment_id)
    story.expect("the processor's charge", None if found is None else found["status"], status)


def _sleep_until(moment_us: int) -> None:
    wait_us = moment_us - clock.now_us()
    assert wait_us <= EXPIRY_WAIT_US_MAX, f"the authorization expires in {wait_us} us"
    if wait_us > 0:
        time.sleep(wait_us / 1_000_000)
