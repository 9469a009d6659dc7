"""A dispute made by its first evidence, whichever of the three sources that is (SPEC §6.2,
issue 41 point 2): the processor's webhook, the status query (`disputes.service.query_status`),
or a settlement report line, which makes paycore ask the processor (the report never makes the
dispute from the line alone). Duplicate and out-of-order arrival across the three: exactly one
dispute, one chargeback transfer, the merchant's balance down by amount plus fee once; the
report's dispute lines matched set-based and, judged one by one, alike. Both transports, both
databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from paycore.disputes import service as disputes
from paycore.kit import actors
from paycore.processor.port import ChargeRequest
from paycore.reconciliation import service as reconciliation
from tests.integration.disputes.support import (
    TENANT,
    Webhook,
    caught,
    dispute,
    disputes_of,
    open_at_sandbox,
    paid,
    posted,
    problems,
    send,
)
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_disputes_from_report import changed, types
from tests.integration.reconciliation.test_reconcile import breaks, report
from tests.integration.reconciliation.test_set_based import every_line_judged

FEE_MINOR = 1500  # the sandbox's dispute fee
AMOUNT_MINOR = 5000
ACTOR = actors.worker("test")


def opened_unheard(env: Env) -> tuple[str, dict[str, Any], str, list[Webhook]]:
    """A merchant, its payment, a chargeback the sandbox opened on it, and the dispute's
    webhooks caught before they reached paycore (to be sent when the test chooses)."""
    merchant = env.account()
    payment = paid(env, merchant, AMOUNT_MINOR)
    processor_dispute_id = open_at_sandbox(env, payment)
    webhooks = caught(env)
    assert len(webhooks) >= 1  # dispute.created
    assert disputes_of(env, payment["id"]) == []
    return merchant, payment, processor_dispute_id, webhooks


def chargeback_transfers(env: Env, dispute_id: str) -> int:
    with env.database.read() as connection:
        found = connection.execute(
            text("SELECT COUNT(*) FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :d"),
            {"t": TENANT, "d": dispute_id},
        ).scalar_one()
    return int(found)


def one_chargeback(env: Env, merchant: str, payment: dict[str, Any]) -> dict[str, Any]:
    """Exactly one dispute on the payment, withdrawn once: its one transfer, the balance."""
    [held] = disputes_of(env, payment["id"])
    assert (held["status"], held["amount_minor"], held["fee_minor"]) == ("needs_response", AMOUNT_MINOR, FEE_MINOR)
    assert chargeback_transfers(env, held["id"]) == 1
    assert posted(env, merchant) == AMOUNT_MINOR - AMOUNT_MINOR - FEE_MINOR
    assert problems(env) == []
    return held


def causes(env: Env, dispute_id: str) -> list[tuple[str | None, str, str]]:
    return [(step["from"], step["to"], step["cause"]) for step in dispute(env, dispute_id)["history"]]


def reconciled(env: Env, lines: list[str]) -> reconciliation.Summary:
    return reconciliation.reconcile(env.database, lines, grace_ms=0, processor=env.processor)


def test_the_status_query_makes_it_and_the_webhook_twice_after_is_stale(env: Env) -> None:
    merchant, payment, processor_dispute_id, webhooks = opened_unheard(env)

    outcome = disputes.query_status(env.database, env.processor, processor_dispute_id, actor=ACTOR)

    assert outcome == "applied"
    held = one_chargeback(env, merchant, payment)
    assert causes(env, held["id"]) == [(None, "needs_response", "status_query")]
    for webhook in webhooks + webhooks:  # the same news, twice, after the query
        assert send(env, webhook) == 200
    assert disputes.query_status(env.database, env.processor, processor_dispute_id, actor=ACTOR) == "stale"
    assert one_chargeback(env, merchant, payment) == held
    assert causes(env, held["id"]) == [(None, "needs_response", "status_query")]


def test_a_webhook_then_the_report_matches_what_the_webhook_made(env: Env) -> None:
    merchant, payment, _, webhooks = opened_unheard(env)
    for webhook in webhooks:
        assert send(env, webhook) == 200
    held = one_chargeback(env, merchant, payment)

    summary = reconciled(env, report(env))

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (3, 3, {})
    assert summary.disputes_recorded == 0  # paycore held it: the processor was not asked
    assert one_chargeback(env, merchant, payment) == held
    assert causes(env, held["id"]) == [(None, "needs_response", "webhook")]


@pytest.mark.parametrize("judged_one_by_one", [False, True])
def test_the_report_first_asks_the_processor_then_the_webhook_is_stale(
    env: Env, monkeypatch: pytest.MonkeyPatch, judged_one_by_one: bool
) -> None:
    merchant, payment, _, webhooks = opened_unheard(env)
    lines = report(env)
    assert sorted(types(lines)) == ["charge", "dispute_fee", "dispute_withdrawal"]
    if judged_one_by_one:
        every_line_judged(monkeypatch)  # matching.judge decides each line, not the staging SQL

    summary = reconciled(env, lines)

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (3, 3, {})
    assert summary.disputes_recorded == 1
    held = one_chargeback(env, merchant, payment)
    assert causes(env, held["id"]) == [(None, "needs_response", "status_query")]
    for webhook in webhooks + webhooks:
        assert send(env, webhook) == 200
    again = reconciled(env, lines)
    assert (again.matched, dict(again.breaks), again.disputes_recorded) == (3, {}, 0)
    assert one_chargeback(env, merchant, payment) == held
    assert causes(env, held["id"]) == [(None, "needs_response", "status_query")]
    assert breaks(env) == []


def test_a_dispute_the_processor_does_not_know_is_missing_in_paycore_and_not_made(env: Env) -> None:
    merchant, payment, _, _ = opened_unheard(env)
    invented = "dp_sbx_NOSUCHDISPUTE"
    lines = changed(report(env), "dispute_withdrawal", processor_id=invented)
    lines = changed(lines, "dispute_fee", processor_id=invented)

    summary = reconciled(env, lines)

    assert (summary.matched, dict(summary.breaks), summary.disputes_recorded) == (1, {"missing_in_paycore": 2}, 0)
    found = sorted((item["type"], item["object_type"], item["detail"]) for item in breaks(env))
    assert found == [("missing_in_paycore", None, f"no dispute {invented}")] * 2
    assert disputes_of(env, payment["id"]) == []  # the line alone makes nothing
    assert posted(env, merchant) == AMOUNT_MINOR
    assert problems(env) == []


def test_a_dispute_on_a_payment_paycore_does_not_hold_is_missing_in_paycore(env: Env) -> None:
    """The processor knows the dispute, but its charge is no payment of paycore's (made at the
    processor by another client): nothing is recorded (the status query's answer is
    `unmatched`) and its lines stay breaks."""
    charge = env.sandbox.charge(ChargeRequest("py_elsewhere", TENANT, AMOUNT_MINOR, "USD", "tok_ok"))
    processor_dispute_id = open_at_sandbox(env, {"processor_reference": charge.processor_charge_id})
    caught(env)
    lines = [line for line in report(env) if not line.startswith("charge,")]

    assert disputes.query_status(env.database, env.processor, processor_dispute_id, actor=ACTOR) == "unmatched"
    summary = reconciled(env, lines)

    assert (summary.matched, dict(summary.breaks), summary.disputes_recorded) == (0, {"missing_in_paycore": 2}, 0)
    with env.database.read() as connection:
        assert disputes.find(connection, TENANT, processor_dispute_id) is None
