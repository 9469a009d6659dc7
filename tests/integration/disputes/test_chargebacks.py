"""A chargeback as the processor reports it (SPEC §6.2, issue 41 points 2-3): the dispute made by
its first webhook, the merchant's balance down by amount and fee (below zero if need be), a won
dispute's amount back, rule zero counting disputed money. Both transports, both databases."""

from __future__ import annotations

from tests.integration.disputes.support import (
    LATER_US,
    caught,
    dispute,
    disputes_of,
    evidence_at_sandbox,
    later,
    open_at_sandbox,
    paid,
    posted,
    problems,
    send,
)
from tests.integration.payments.conftest import Env

FEE_MINOR = 1500  # the sandbox's dispute fee


def refund(env: Env, payment_id: str, amount_minor: int, key: str) -> tuple[int, dict[str, object]]:
    response = env.client.post(
        f"/v1/payments/{payment_id}/refunds", json={"amount_minor": amount_minor}, headers={"Idempotency-Key": key}
    )
    return response.status_code, response.json()


def test_a_tok_disputed_payment_is_charged_back_then_won(env: Env) -> None:
    merchant = env.account()
    payment = paid(env, merchant, 5000, token="tok_disputed")
    opened_at = later()
    assert env.sandbox.settle_due(opened_at) >= 1  # about one second later the bank disputes it
    assert env.deliver(opened_at) >= 1  # dispute.created
    [listed] = disputes_of(env, payment["id"])
    found = dispute(env, listed["id"])
    assert found["id"].startswith("dp_")
    assert {key: found[key] for key in ("payment_id", "amount_minor", "currency", "fee_minor", "reason", "status")} == {
        "payment_id": payment["id"],
        "amount_minor": 5000,
        "currency": "USD",
        "fee_minor": FEE_MINOR,
        "reason": "fraudulent",
        "status": "needs_response",
    }
    assert found["evidence_due_by"] > found["created_at"]
    assert [(step["from"], step["to"], step["cause"]) for step in found["history"]] == [
        (None, "needs_response", "webhook")
    ]
    assert posted(env, merchant) == 5000 - 5000 - FEE_MINOR  # amount and fee withdrawn: the merchant owes
    shown = env.client.get(f"/v1/payments/{payment['id']}").json()
    assert (shown["disputed_minor"], shown["refundable_minor"]) == (5000, 0)
    status, body = refund(env, payment["id"], 1, "rf-over")
    assert (status, body["error"]) == (422, "over_refund")
    assert problems(env) == []

    processor_dispute_id = env.sandbox.disputes_of_charge(payment["id"])[0].dispute_id
    evidence_at_sandbox(env, processor_dispute_id, "signed delivery receipt: winning_evidence")
    decided_at = later() + LATER_US  # after the evidence's own moment
    env.sandbox.settle_due(decided_at)  # the network decides
    assert env.deliver(decided_at) >= 2  # dispute.updated (under_review), dispute.closed (won)
    won = dispute(env, found["id"])
    assert won["status"] == "won"
    assert [step["to"] for step in won["history"]] == ["needs_response", "under_review", "won"]
    assert posted(env, merchant) == 5000 - FEE_MINOR  # the amount is back, the fee is kept
    shown = env.client.get(f"/v1/payments/{payment['id']}").json()
    assert (shown["disputed_minor"], shown["refundable_minor"]) == (0, 5000)
    assert problems(env) == []


def test_a_partial_chargeback_leaves_the_rest_refundable(env: Env) -> None:
    merchant = env.account()
    payment = paid(env, merchant, 5000)
    open_at_sandbox(env, payment, amount_minor=3000)
    assert env.deliver() >= 1
    assert refund(env, payment["id"], 2001, "rf-1")[0] == 422  # 3000 disputed + 2001 > 5000
    assert refund(env, payment["id"], 2000, "rf-2")[0] == 201
    assert posted(env, merchant) == 5000 - 3000 - FEE_MINOR
    assert problems(env) == []


def test_duplicate_and_out_of_order_webhooks_make_one_dispute(env: Env) -> None:
    merchant = env.account()
    payment = paid(env, merchant, 4000)
    dispute_id = open_at_sandbox(env, payment)
    [created] = caught(env)
    evidence_at_sandbox(env, dispute_id, "winning_evidence")
    env.sandbox.settle_due(later())
    updated, closed = caught(env, later())
    assert [send(env, webhook) for webhook in (closed, created, updated, closed, created)] == [200] * 5
    [listed] = disputes_of(env, payment["id"])
    found = dispute(env, listed["id"])
    assert found["status"] == "won"  # made by its last event, which came first; the older ones stale
    assert [(step["from"], step["to"]) for step in found["history"]] == [(None, "won")]
    assert posted(env, merchant) == 4000 - FEE_MINOR  # withdrawn and reinstated once each
    assert problems(env) == []


def test_a_closing_webhook_after_the_first_skips_the_missing_step(env: Env) -> None:
    merchant = env.account()
    payment = paid(env, merchant, 4000)
    dispute_id = open_at_sandbox(env, payment)
    [created] = caught(env)
    evidence_at_sandbox(env, dispute_id, "losing_evidence")
    env.sandbox.settle_due(later())
    updated, closed = caught(env, later())
    assert [send(env, webhook) for webhook in (created, closed, updated)] == [200] * 3
    [listed] = disputes_of(env, payment["id"])
    assert [(step["from"], step["to"]) for step in dispute(env, listed["id"])["history"]] == [
        (None, "needs_response"),
        ("needs_response", "lost"),
    ]
    assert posted(env, merchant) == 4000 - 4000 - FEE_MINOR  # lost: nothing more moves
    assert problems(env) == []


def test_a_chargeback_is_never_refused_by_the_overdraft_flag(env: Env) -> None:
    response = env.client.post(
        "/v1/accounts",
        json={"code": "merchant.guarded", "currency": "USD", "normal_balance": "credit", "no_overdraft": True},
        headers={"Idempotency-Key": "acct-guarded"},
    )
    merchant = response.json()["id"]
    payment = paid(env, merchant, 1000)
    open_at_sandbox(env, payment)
    assert env.deliver() >= 1
    assert posted(env, merchant) == 1000 - 1000 - FEE_MINOR
    assert disputes_of(env, payment["id"])[0]["status"] == "needs_response"
    assert problems(env) == []
