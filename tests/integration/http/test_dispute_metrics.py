"""`paycore_disputes{status}` and `paycore_dispute_evidence_due_in_seconds` (SPEC §6.2, §12;
issue 41 point 4), on both databases with the real sandbox: a dispute counts in its status, and
the nearest evidence deadline is that of the disputes awaiting an answer, until evidence goes in
(the deadline moved by writing it, as the clock would, never by mocking the clock or the
database)."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from paycore.disputes import states
from tests.integration.disputes.support import disputes_of, open_at_sandbox, paid
from tests.integration.http.test_operations_metrics import by, samples
from tests.integration.payments.conftest import Env, env, processor, sandbox

__all__ = ["env", "processor", "sandbox"]

HOUR_S = 3_600
WINDOW_S = 7 * 24 * HOUR_S  # the sandbox's evidence window
ALERT_BELOW_S = 48 * HOUR_S  # PaycoreDisputeEvidenceDueSoon


@pytest.fixture
def transport() -> str:
    return "inprocess"


def due_in(env: Env) -> float:
    [(labels, found)] = samples(env.client)["paycore_dispute_evidence_due_in_seconds"].items()
    assert labels == frozenset()
    assert math.isinf(found) or found == int(found), found  # whole seconds, or +Inf
    return found


def opened(env: Env, amount_minor: int) -> str:
    payment = paid(env, env.account(), amount_minor)
    open_at_sandbox(env, payment)
    assert env.deliver() >= 1  # dispute.created
    [found] = disputes_of(env, payment["id"])
    return str(found["id"])


def due_within(env: Env, dispute_id: str, seconds: int) -> None:
    """Make the dispute's deadline `seconds` from now: what the clock would have done."""
    with env.database.engine.connect() as connection, connection.begin():
        moved = connection.execute(
            text("UPDATE disputes SET evidence_due_by_us = evidence_due_by_us - :by_us WHERE id = :id"),
            {"by_us": (WINDOW_S - seconds) * 1_000_000, "id": dispute_id},
        )
        assert moved.rowcount == 1


def test_disputes_by_status_and_the_nearest_deadline_until_evidence_goes_in(env: Env) -> None:
    assert by(env.client, "paycore_disputes", "status") == dict.fromkeys(states.STATUSES, 0)
    assert due_in(env) == math.inf  # none awaits an answer: no deadline
    first = opened(env, 5000)
    second = opened(env, 3000)
    counts = by(env.client, "paycore_disputes", "status")
    assert counts == {**dict.fromkeys(states.STATUSES, 0), "needs_response": 2}
    assert WINDOW_S - 60 <= due_in(env) <= WINDOW_S
    due_within(env, second, 47 * HOUR_S)  # the alert's condition

    nearest = due_in(env)

    assert 47 * HOUR_S - 60 <= nearest <= 47 * HOUR_S < ALERT_BELOW_S
    body = {"text": "signed delivery receipt"}
    answered = env.client.post(f"/v1/disputes/{second}/evidence", json=body, headers={"Idempotency-Key": "ev"})
    assert answered.status_code == 200 and answered.json()["status"] == "under_review", answered.text
    assert WINDOW_S - 60 <= due_in(env) <= WINDOW_S  # the answered one's deadline no longer counts
    counts = by(env.client, "paycore_disputes", "status")
    assert (counts["needs_response"], counts["under_review"]) == (1, 1)
    accepted = env.client.post(f"/v1/disputes/{first}/accept", headers={"Idempotency-Key": "acc"})
    assert accepted.status_code == 200 and accepted.json()["status"] == "lost", accepted.text
    assert due_in(env) == math.inf
    assert by(env.client, "paycore_disputes", "status") == {
        **dict.fromkeys(states.STATUSES, 0),
        "under_review": 1,
        "lost": 1,
    }


def test_a_passed_deadline_is_negative(env: Env) -> None:
    dispute_id = opened(env, 2000)
    due_within(env, dispute_id, -2 * HOUR_S)  # passed; the processor's dispute.closed not heard yet
    assert -2 * HOUR_S - 60 <= due_in(env) <= -2 * HOUR_S
