"""Refunds left in doubt, resolved by the sandbox's settlement report through the real
reconciliation (ADR 0014), on both databases. `refunds/reconcile.py`, the simulate-only path
that did this for `paycore simulate` alone, is gone: these prove what it did, on the real path
(the report's final status applied through the refund's lifecycle, the amount released when it
failed, a refund already settled left alone)."""

from __future__ import annotations

import datetime as dt

import pytest

from paycore.ledger.verify import verify
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.service import CAUSE
from tests.integration.payments.conftest import Env
from tests.integration.refunds import support


@pytest.fixture
def transport() -> str:
    return "inprocess"


def report(env: Env) -> list[str]:
    return list(env.processor.settlement_report(dt.datetime.now(dt.UTC).date().isoformat()))


def in_doubt_refund(env: Env, token: str) -> tuple[str, str]:
    """(payment id, refund id): the processor made the refund, its answer was lost."""
    _, payment_id = support.paid(env, token=token)
    refund = support.created(env, payment_id, 400)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["refund"]})
    assert support.send(env) == 1
    assert support.status_of(env, refund["id"]) == "in_doubt"
    return payment_id, str(refund["id"])


@pytest.mark.parametrize(
    ("token", "final", "refundable_minor"),
    [("tok_ok", "succeeded", 600), ("tok_refund_declined", "failed", 1000)],
)
def test_the_report_settles_an_in_doubt_refund_through_its_lifecycle(
    env: Env, token: str, final: str, refundable_minor: int
) -> None:
    payment_id, refund_id = in_doubt_refund(env, token)

    summary = reconciliation.reconcile(env.database, report(env))

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    assert support.history(env, refund_id)[-1] == ("in_doubt", final, CAUSE)
    payment = env.client.get(f"/v1/payments/{payment_id}").json()
    assert payment["refundable_minor"] == refundable_minor  # a failed refund gives its amount back
    with env.database.read() as connection:
        assert verify(connection).ok


def test_a_refund_already_settled_is_left_alone(env: Env) -> None:
    _, payment_id = support.paid(env)
    refund = support.created(env, payment_id, 400)
    assert support.send(env) == 1
    assert support.status_of(env, refund["id"]) == "succeeded"
    steps = support.history(env, refund["id"])

    summary = reconciliation.reconcile(env.database, report(env))

    assert (summary.matched, summary.resolved, dict(summary.breaks)) == (2, 0, {})
    assert support.history(env, refund["id"]) == steps
