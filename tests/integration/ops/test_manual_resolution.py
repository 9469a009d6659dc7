"""Manual resolution, maker-checker (issue 28 §2): an item no evidence settles is resolved by
two people; only the confirmation moves it, through the same transition and ledger effects as
the processor's answer; the processor contradicting it later opens a break and counts as an
escaped money defect."""

from __future__ import annotations

from typing import Any

from tests.integration.ops.conftest import Console, act
from tests.support.days import clear_of_midnight


def in_doubt_payment(console: Console) -> tuple[str, str]:
    """(merchant, a payment the processor charged whose answer was lost: in doubt)."""
    env = console.env
    merchant = env.account()
    env.faults({"fault": "drop_response", "next_n": 1})
    response = env.pay(merchant)
    assert (response.status_code, response.json()["status"]) == (202, "in_doubt"), response.text
    return merchant, str(response.json()["id"])


def window(console: Console, seconds: int) -> None:
    """Shorten acme's manual window: a loosening, so an approver's, in the console (carol)."""
    data = {"refund_approval_threshold": "", "manual_resolution_after_seconds": str(seconds)}
    changed = act(console.signed_in("carol"), "/ops/settings/acme", data, page="/ops/settings?tenant=acme")
    assert changed.status_code == 303, changed.text


def propose(console: Console, who: str, payment_id: str, outcome: str) -> Any:
    browser = console.signed_in(who)
    page = f"/ops/payments/{payment_id}"
    data = {"outcome": outcome, "evidence": "the processor's support desk confirmed it by phone (ticket 881)"}
    return browser, act(browser, f"/ops/in-doubt/payment/{payment_id}/propose", data, page=page)


def payment(console: Console, payment_id: str) -> dict[str, Any]:
    return dict(console.env.client.get(f"/v1/payments/{payment_id}").json())


def metric(console: Console, line_start: str) -> str:
    lines = [line for line in console.env.client.get("/metrics").text.splitlines() if line.startswith(line_start)]
    assert len(lines) == 1, lines
    return lines[0].rsplit(" ", 1)[1]


def test_not_eligible_before_the_tenants_window_then_two_people_settle_it(console: Console) -> None:
    merchant, payment_id = in_doubt_payment(console)
    _, early = propose(console, "alice", payment_id, "failed")
    assert early.status_code == 409 and "manual window is 259200 s" in early.text
    window(console, 0)
    alice, proposed = propose(console, "alice", payment_id, "failed")
    assert proposed.status_code == 303
    assert payment(console, payment_id)["status"] == "in_doubt"  # a proposal moves nothing
    _, twice = propose(console, "bob", payment_id, "succeeded")
    assert twice.status_code == 409 and "waits for a second person" in twice.text
    page = f"/ops/payments/{payment_id}"
    assert act(alice, f"/ops/in-doubt/payment/{payment_id}/confirm", page=page).status_code == 403  # an operator
    console.operator("otto", "approver")
    _, mine = propose(console, "otto", payment_id, "failed")  # otto cannot propose: one is open
    assert mine.status_code == 409

    bob = console.signed_in("bob")
    confirmed = act(bob, f"/ops/in-doubt/payment/{payment_id}/confirm", {"note": "matches the bank"}, page=page)
    assert confirmed.status_code == 303
    body = payment(console, payment_id)
    assert (body["status"], body["failure_code"]) == ("failed", "manual_resolution")
    assert console.env.balance(merchant) == {**console.env.balance(merchant), "pending_minor": 0, "posted_minor": 0}
    last = body["history"][-1]
    assert (last["from"], last["to"], last["cause"], last["actor"]) == (
        "in_doubt",
        "failed",
        "manual_resolution",
        "operator:bob",
    )
    events = console.env.client.get(f"/v1/payments/{payment_id}/events").json()["data"]
    [change] = [e for e in events if e["kind"] == "state_change" and e["to"] == "failed"]
    assert change["data"]["proposed_by"] == "operator:alice" and change["data"]["confirmed_by"] == "operator:bob"
    assert "ticket 881" in change["data"]["evidence"]
    timeline = bob.get(page).text
    assert "operator:alice" in timeline and "operator:bob" in timeline and "manual resolution confirmed" in timeline


def test_the_proposer_never_confirms_or_rejects_their_own_and_a_rejection_moves_nothing(console: Console) -> None:
    _, payment_id = in_doubt_payment(console)
    window(console, 0)
    bob, proposed = propose(console, "bob", payment_id, "succeeded")
    assert proposed.status_code == 303
    page = f"/ops/payments/{payment_id}"
    same = act(bob, f"/ops/in-doubt/payment/{payment_id}/confirm", page=page)
    assert same.status_code == 403 and "cannot also approve" in same.text
    assert act(bob, f"/ops/in-doubt/payment/{payment_id}/reject", page=page).status_code == 403
    carol = console.signed_in("carol")
    assert act(carol, f"/ops/in-doubt/payment/{payment_id}/reject", page=page).status_code == 303
    assert payment(console, payment_id)["status"] == "in_doubt"
    again = act(carol, f"/ops/in-doubt/payment/{payment_id}/confirm", page=page)
    assert again.status_code == 409  # nothing proposed any more


def test_the_processor_contradicting_a_manual_outcome_opens_a_break_and_moves_nothing(console: Console) -> None:
    env = console.env
    _, payment_id = in_doubt_payment(console)  # the processor did charge it
    window(console, 0)
    propose(console, "alice", payment_id, "failed")
    page = f"/ops/payments/{payment_id}"
    assert act(console.signed_in("bob"), f"/ops/in-doubt/payment/{payment_id}/confirm", page=page).status_code == 303
    assert metric(console, 'paycore_escaped_money_defects_total{kind="manual_resolution_contradicted"}') == "0.0"

    assert env.deliver() >= 1  # the processor's charge.succeeded webhook, late
    assert payment(console, payment_id)["status"] == "failed"  # never moved backwards
    breaks = env.client.get("/v1/reconciliation/breaks", params={"type": "manual_resolution_contradicted"}).json()
    [found] = breaks["data"]
    assert (found["status"], found["object_id"]) == ("open", payment_id)
    assert metric(console, 'paycore_escaped_money_defects_total{kind="manual_resolution_contradicted"}') == "1.0"
    opened = 'paycore_reconciliation_breaks{status="open",type="manual_resolution_contradicted"}'
    assert metric(console, opened) == "1.0"
    assert env.deliver() == 0  # nothing more to deliver; a redelivery would find the break stored


def test_an_open_break_makes_an_item_eligible_before_its_window(console: Console) -> None:
    """A reconciliation break left for a person (the report disagrees on the amount: nothing is
    proved, the payment stays in doubt) makes the item it names resolvable at once."""
    from paycore.reconciliation import service as reconciliation
    from tests.integration.reconciliation.test_reconcile import changed, today

    clear_of_midnight()  # it reads today's report of what it made (tests/support/days.py)
    env = console.env
    _, payment_id = in_doubt_payment(console)
    _, early = propose(console, "alice", payment_id, "succeeded")
    assert early.status_code == 409  # the default window: 72 h
    lines = changed(list(env.processor.settlement_report(today())), payment_id, amount_minor="999")
    assert dict(reconciliation.reconcile(env.database, lines).breaks) == {"amount_mismatch": 1}
    assert payment(console, payment_id)["status"] == "in_doubt"
    _, proposed = propose(console, "alice", payment_id, "succeeded")
    assert proposed.status_code == 303
    assert "an open reconciliation break names it" in console.signed_in("bob").get(f"/ops/payments/{payment_id}").text


def test_asking_again_makes_the_item_due_now_even_after_its_rounds_ran_out(console: Console) -> None:
    env = console.env
    env.faults({"fault": "error_500", "percent": 100, "ops": ["charge", "get_charge"]})
    merchant = env.account()
    payment_id = env.pay(merchant).json()["id"]
    for _ in range(5):
        env.resolve()
    events = env.client.get(f"/v1/payments/{payment_id}/events").json()["data"]
    asked_before = len([e for e in events if e["type"] == "processor.get_charge"])
    assert env.resolve() == 0  # rounds ran out: nobody asks any more
    act(console.signed_in("alice"), f"/ops/in-doubt/payment/{payment_id}/ask")
    env.sandbox.set_fault_plan({"seed": 1, "rules": []})
    assert env.resolve() == 1
    assert payment(console, payment_id)["status"] == "succeeded"
    events = env.client.get(f"/v1/payments/{payment_id}/events").json()["data"]
    assert len([e for e in events if e["type"] == "processor.get_charge"]) == asked_before + 1


def test_a_settlement_report_contradicting_a_manual_outcome_is_that_break_not_a_status_mismatch(
    console: Console,
) -> None:
    from paycore.reconciliation import service as reconciliation
    from tests.integration.reconciliation.test_reconcile import today

    clear_of_midnight()  # it reads today's report of what it made (tests/support/days.py)
    env = console.env
    _, payment_id = in_doubt_payment(console)  # charged at the processor; the answer was lost
    window(console, 0)
    propose(console, "alice", payment_id, "failed")
    page = f"/ops/payments/{payment_id}"
    assert act(console.signed_in("bob"), f"/ops/in-doubt/payment/{payment_id}/confirm", page=page).status_code == 303
    summary = reconciliation.reconcile(env.database, list(env.processor.settlement_report(today())))
    assert dict(summary.breaks) == {"manual_resolution_contradicted": 1}
    [found] = env.client.get("/v1/reconciliation/breaks").json()["data"]
    assert (found["type"], found["object_id"]) == ("manual_resolution_contradicted", payment_id)
    assert "resolved it by hand as failed" in found["detail"]
    assert payment(console, payment_id)["status"] == "failed"
    assert metric(console, 'paycore_escaped_money_defects_total{kind="manual_resolution_contradicted"}') == "1.0"
    again = reconciliation.reconcile(env.database, list(env.processor.settlement_report(today())))
    assert dict(again.breaks) == {}  # met again, not stored twice, not superseded
    assert env.client.get("/v1/reconciliation/breaks", params={"status": "open"}).json()["data"][0]["id"] == found["id"]
