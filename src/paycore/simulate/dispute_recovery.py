"""A dispute webhook lost and recovered from the report (SPEC §6.2, ADR 0030): the
processor opens a chargeback on a `tok_disputed` payment and its `dispute.created` webhook is
never sent (the fault plan's `drop_webhook`), so paycore does not know of it and the merchant's
balance still shows the money. The day's settlement report lists the withdrawal and the fee;
reconciliation does not make the dispute from those lines: it asks the processor for the
dispute they name (the status query, no transaction open), records its answer through the one
recording function a webhook's goes through, and then the lines match. The books show the
chargeback once; a second report run and a second status query change nothing."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from paycore.disputes import service as disputes
from paycore.kit import actors

if TYPE_CHECKING:
    from paycore.simulate.scenarios import Story

DISPUTED_MINOR: Final = 1000
FEE_MINOR: Final = 1500  # the sandbox's dispute fee (`dispute_fee_minor`)
OPEN_TIMEOUT_S: Final = 15  # the sandbox opens a tok_disputed charge's dispute about a second after it


def dispute_webhook_lost_recovered_from_report(story: Story) -> None:
    world = story.world
    world.faults({"fault": "drop_webhook", "next_n": 1, "ops": ["dispute_open"]})
    payment = story.pay(DISPUTED_MINOR, token="tok_disputed")
    story.expect("paid", story.status("payment", payment), "succeeded")
    world.wait_for(lambda: _opened_at_processor(story, payment) is not None, "the processor opens the dispute")
    world.settle_and_deliver()
    world.say("driver", "the processor opened a chargeback; its dispute.created webhook was dropped")
    story.expect("paycore has not heard of it", _disputes(story, payment), [])
    story.expect("the merchant's posted balance", _posted(story), DISPUTED_MINOR)

    summaries = world.reconcile()
    counts = tuple(sum(getattr(summary, name) for summary in summaries) for name in ("lines_read", "matched"))
    story.expect("report lines read, matched", counts, (3, 3))
    story.expect("new breaks", dict(sum((summary.breaks for summary in summaries), Counter())), {})
    recorded = sum(summary.disputes_recorded for summary in summaries)
    world.say("paycore", f"asked the processor about the report's unknown dispute: {recorded} recorded")
    story.expect("disputes recorded from the processor's answer", recorded, 1)
    [held] = _disputes(story, payment)
    said = (held["status"], held["amount_minor"], held["fee_minor"])
    story.expect("the dispute, as the processor said it", said, ("needs_response", DISPUTED_MINOR, FEE_MINOR))
    history = [(step["from"], step["to"], step["cause"]) for step in world.get(f"/v1/disputes/{held['id']}")["history"]]
    story.expect("made by the status query", history, [(None, "needs_response", "status_query")])
    story.expect("withdrawn once: amount and fee", _posted(story), DISPUTED_MINOR - DISPUTED_MINOR - FEE_MINOR)

    again = world.reconcile()
    story.expect("a second run finds it held", sum(summary.disputes_recorded for summary in again), 0)
    asked = disputes.query_status(
        world.database, world.processor, _opened_at_processor(story, payment) or "", actor=actors.LOCAL
    )
    story.expect("a later status query", asked, "stale")
    story.expect("still withdrawn once", _posted(story), DISPUTED_MINOR - DISPUTED_MINOR - FEE_MINOR)


def _opened_at_processor(story: Story, payment_id: str) -> str | None:
    """The processor's dispute id on the payment's charge, once it has opened one."""
    found = story.world.processor.disputes_of_charge(payment_id)
    return found[0].dispute_id if found else None


def _disputes(story: Story, payment_id: str) -> list[dict[str, Any]]:
    return list(story.world.get(f"/v1/disputes?payment_id={payment_id}")["data"])


def _posted(story: Story) -> int:
    return int(story.world.get(f"/v1/accounts/{story.merchant}/balance")["posted_minor"])
