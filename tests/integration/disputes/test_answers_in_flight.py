"""A dispute answer whose reply was lost, settled by the worker's own status query (issue 41
point 2; ADR 0030 decision 6): the lost call keeps the dispute in `dispute_answers_in_flight`
(migration 0037), the `resolve_dispute_answers` round asks the processor and records its word
through `disputes.service.record`, which clears the row once the dispute takes no more answers;
whatever settles it first (a webhook, a retry) clears it too. Both transports, both databases."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from paycore.disputes import in_flight
from paycore.workers.jobs import WorkerContext, resolve_dispute_answers
from tests.integration.disputes.support import TENANT, dispute, later, problems
from tests.integration.disputes.test_answers import accept, evidence, opened
from tests.integration.payments.conftest import Env


def kept(env: Env) -> list[dict[str, Any]]:
    """The disputes kept in flight, as rows."""
    with env.database.read() as connection:
        rows = connection.execute(text("SELECT * FROM dispute_answers_in_flight ORDER BY id")).mappings()
        return [dict(row) for row in rows]


def worker_round(env: Env) -> int:
    return resolve_dispute_answers(WorkerContext.create(env.database, env.settings, env.processor))


def lost(env: Env, kind: str) -> dict[str, Any]:
    """A dispute whose answer (`kind`) reached the processor, and whose reply was lost: 202."""
    _, listed = opened(env)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": [f"dispute_{kind}"]})
    response = evidence(env, listed["id"], "winning_evidence", "k-1") if kind == "evidence" else None
    response = response or accept(env, listed["id"], "k-1")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "needs_response"  # nothing proven yet
    return listed


def test_the_worker_asks_about_a_lost_evidence_once_and_the_row_clears(env: Env) -> None:
    listed = lost(env, "evidence")
    [row] = kept(env)
    assert (row["tenant_id"], row["id"], row["kind"], row["attempts"]) == (TENANT, listed["id"], "evidence", 0)

    assert worker_round(env) == 1

    settled = dispute(env, listed["id"])
    assert settled["status"] in ("under_review", "won")  # won: the decision outran the query (HTTP)
    assert [step["cause"] for step in settled["history"]][1:] == ["status_query"] * (len(settled["history"]) - 1)
    assert kept(env) == []
    assert worker_round(env) == 0  # nothing left to ask about
    assert problems(env) == []


def test_a_lost_accept_is_settled_lost_by_the_worker(env: Env) -> None:
    listed = lost(env, "accept")
    assert worker_round(env) == 1
    assert dispute(env, listed["id"])["status"] == "lost"
    assert kept(env) == []


def test_the_processors_webhook_settles_it_first_and_the_worker_finds_nothing(env: Env) -> None:
    listed = lost(env, "evidence")
    assert env.deliver(later()) >= 1  # dispute.updated (under_review), then perhaps closed
    assert dispute(env, listed["id"])["status"] in ("under_review", "won")
    assert kept(env) == []
    assert worker_round(env) == 0


def test_a_request_that_never_arrived_stays_kept_and_backs_off(env: Env) -> None:
    """The processor never got the answer (request lost): its word is `needs_response` without
    evidence, which settles nothing; the row stays, its round counted, due again later."""
    _, listed = opened(env)
    env.faults({"fault": "drop_request", "next_n": 1, "ops": ["dispute_evidence"]})
    assert evidence(env, listed["id"], "winning_evidence", "k-1").status_code == 202

    assert worker_round(env) == 1

    [row] = kept(env)
    assert (row["attempts"], row["claimed_by"]) == (1, None)
    assert row["next_attempt_at_us"] is not None
    assert dispute(env, listed["id"])["status"] == "needs_response"
    retried = evidence(env, listed["id"], "winning_evidence", "k-1")  # the same key: the same request id
    assert (retried.status_code, retried.json()["status"]) == (200, "under_review")
    assert kept(env) == []  # the retry's answer settled it
    assert in_flight.JOB == "resolve_dispute_answers"
