"""The dispute scenarios (SPEC §6.2): a `tok_disputed` payment that the
processor disputes about a second after it succeeds, answered with winning evidence through
paycore and won; and a chargeback nobody answers, lost by silence when its evidence window
passes (the sandbox's admin call gives that one dispute a window of two seconds). paycore learns
each step from the processor's webhooks only. Each checks the merchant's balance at every step
(amount and fee withdrawn, the amount back when won, the fee kept either way) and the loss
report's dispute totals; `invariants.check` then judges the world (the ledger verifies, the
books against every dispute's transfers included)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paycore.simulate.world import _http as sandbox_call  # the world's one HTTP client of the sandbox
from paycore_sandbox.disputes import OpenDisputeRequest

if TYPE_CHECKING:
    from paycore.simulate.scenarios import Story

PAID_MINOR = 1000
FEE_MINOR = 1500  # the sandbox's dispute fee (SandboxSettings.dispute_fee_minor)
SHORT_WINDOW_MS = 2_000  # the evidence window of the dispute lost by silence
DISPUTE_WAIT_S = 15  # the processor's steps are a second or two apart; a loaded machine is slower
WINNING_TEXT = "signed delivery receipt: winning_evidence"


def dispute_won(story: Story) -> None:
    """`tok_disputed`: the processor's dispute.created withdraws 1000 and the fee 1500 (the
    merchant owes 1500); winning evidence through paycore puts it `under_review`; the network
    decides about a second later and its dispute.closed gives the 1000 back, the fee kept."""
    world = story.world
    payment = story.pay(PAID_MINOR, token="tok_disputed")
    story.expect("paid", story.status("payment", payment), "succeeded")
    dispute = _arrived(story, payment)
    story.expect("opened by the processor", (dispute["status"], dispute["fee_minor"]), ("needs_response", FEE_MINOR))
    story.expect("amount and fee withdrawn: posted", _posted(story), PAID_MINOR - PAID_MINOR - FEE_MINOR)
    status, body = world.post(f"/v1/disputes/{dispute['id']}/evidence", {"text": WINNING_TEXT}, key="evidence-1")
    story.expect("evidence submitted", (status, body.get("status")), (200, "under_review"))
    world.wait_for(lambda: story.status("dispute", dispute["id"]) == "won", "the network's decision", DISPUTE_WAIT_S)
    story.expect(
        "each step",
        story.history("dispute", dispute["id"]),
        [
            (None, "needs_response", "webhook"),
            ("needs_response", "under_review", "api_request"),
            ("under_review", "won", "webhook"),
        ],
    )
    story.expect("the amount back, the fee kept: posted", _posted(story), PAID_MINOR - FEE_MINOR)
    story.expect("the processor's dispute", _at_processor(story, payment), "won")
    story.expect("the loss report: fee, lost, loss", _losses(story), (FEE_MINOR, 0, FEE_MINOR))


def dispute_lost_by_silence(story: Story) -> None:
    """A chargeback of a paid 1000 with a two-second evidence window, never answered: the
    processor closes it `lost` when the window passes and paycore hears it by webhook; nothing
    more moves (1000 and the fee stay withdrawn), a late answer is 409, and the loss report
    counts the fee and the 1000."""
    world = story.world
    payment = story.pay(PAID_MINOR)
    story.expect("paid", story.status("payment", payment), "succeeded")
    _open_at_processor(story, payment, SHORT_WINDOW_MS)
    dispute = _arrived(story, payment)
    story.expect("opened by the processor", dispute["status"], "needs_response")
    story.expect("amount and fee withdrawn: posted", _posted(story), PAID_MINOR - PAID_MINOR - FEE_MINOR)
    world.say("driver", "no answer: the evidence window passes")
    world.wait_for(lambda: story.status("dispute", dispute["id"]) == "lost", "the window passing", DISPUTE_WAIT_S)
    story.expect(
        "lost on the processor's word",
        story.history("dispute", dispute["id"]),
        [(None, "needs_response", "webhook"), ("needs_response", "lost", "webhook")],
    )
    story.expect("nothing more moved: posted", _posted(story), PAID_MINOR - PAID_MINOR - FEE_MINOR)
    status, body = world.post(f"/v1/disputes/{dispute['id']}/evidence", {"text": WINNING_TEXT}, key="evidence-late")
    story.expect("evidence after the window", (status, body.get("error")), (409, "dispute_not_open"))
    story.expect("the processor's dispute", _at_processor(story, payment), "lost")
    story.expect("the loss report: fee, lost, loss", _losses(story), (FEE_MINOR, PAID_MINOR, FEE_MINOR + PAID_MINOR))


def _arrived(story: Story, payment_id: str) -> dict[str, Any]:
    """The payment's dispute once the processor's dispute.created reached paycore."""
    found: list[dict[str, Any]] = []

    def listed() -> bool:
        found[:] = story.world.get(f"/v1/disputes?payment_id={payment_id}")["data"]
        return bool(found)

    story.world.wait_for(listed, "the processor's dispute.created", DISPUTE_WAIT_S)
    story.expect("one dispute", len(found), 1)
    return found[0]


def _open_at_processor(story: Story, payment_id: str, window_ms: int) -> None:
    """The sandbox's admin call: a chargeback of all of the payment, with its own window."""
    world = story.world
    reference = str(world.get(f"/v1/payments/{payment_id}")["processor_reference"])
    request = OpenDisputeRequest(reference, evidence_window_ms=window_ms)
    if world.sandbox is not None:
        world.sandbox.open_dispute(request)
    else:
        status, body = sandbox_call(world.sandbox_url, "POST", "/v1/sandbox/disputes", vars(request))
        assert status == 200, (status, body)
    world.say("driver", f"the processor opens a chargeback of {payment_id} (evidence window {window_ms} ms)")


def _at_processor(story: Story, payment_id: str) -> str | None:
    """The status of the payment's dispute at the processor (None: it has none)."""
    world = story.world
    if world.sandbox is not None:
        found = [result.status for result in world.sandbox.disputes_of_charge(payment_id)]
    else:
        status, body = sandbox_call(world.sandbox_url, "GET", f"/v1/disputes?charge_request_id={payment_id}")
        assert status == 200, (status, body)
        found = [item["status"] for item in body["data"]]
    return found[0] if len(found) == 1 else None


def _posted(story: Story) -> int:
    return int(story.world.get(f"/v1/accounts/{story.merchant}/balance")["posted_minor"])


def _losses(story: Story) -> tuple[int, int, int] | None:
    """The loss report's dispute totals over all time, in USD (the world's one currency)."""
    totals = story.world.get("/v1/reports/losses")["dispute_totals"]
    if len(totals) != 1 or totals[0]["currency"] != "USD":
        return None
    return totals[0]["dispute_fees_minor"], totals[0]["lost_chargebacks_minor"], totals[0]["loss_minor"]
