"""A tenant's answers to a dispute through paycore's API (SPEC §6.2, issue 41 point 2):
`POST /v1/disputes/{id}/evidence` and `/accept`, each idempotent, the processor called outside
any transaction, a lost answer 202 and settled by evidence. Both transports, both databases."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.disputes import answers
from paycore.disputes import service as disputes
from paycore.kit import actors
from tests.integration.disputes.support import (
    LATER_US,
    TENANT,
    dispute,
    disputes_of,
    later,
    open_at_sandbox,
    paid,
    posted,
    problems,
)
from tests.integration.payments.conftest import Env

FEE_MINOR = 1500  # the sandbox's dispute fee


def opened(env: Env, amount_minor: int = 5000, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    """A merchant account and a dispute opened on its payment, as paycore recorded it."""
    merchant = env.account()
    payment = paid(env, merchant, amount_minor)
    open_at_sandbox(env, payment, **kwargs)
    assert env.deliver() >= 1  # dispute.created
    [listed] = disputes_of(env, payment["id"])
    return merchant, listed


def evidence(env: Env, dispute_id: str, text: str, key: str, **extra: Any) -> Any:
    body = {"text": text, **extra}
    return env.client.post(f"/v1/disputes/{dispute_id}/evidence", json=body, headers={"Idempotency-Key": key})


def accept(env: Env, dispute_id: str, key: str) -> Any:
    return env.client.post(f"/v1/disputes/{dispute_id}/accept", headers={"Idempotency-Key": key})


def test_winning_evidence_puts_it_under_review_then_won_with_the_amount_back(env: Env) -> None:
    merchant, listed = opened(env)
    assert posted(env, merchant) == 5000 - 5000 - FEE_MINOR
    response = evidence(env, listed["id"], "signed delivery receipt: winning_evidence", "ev-1", metadata={"a": "b"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["id"], body["status"]) == (listed["id"], "under_review")
    assert [(step["from"], step["to"], step["cause"]) for step in body["history"]] == [
        (None, "needs_response", "webhook"),
        ("needs_response", "under_review", "api_request"),
    ]
    replay = evidence(env, listed["id"], "signed delivery receipt: winning_evidence", "ev-1", metadata={"a": "b"})
    assert (replay.status_code, replay.json()) == (200, body)
    assert replay.headers["Idempotent-Replayed"] == "true"
    decided_at = later() + LATER_US
    env.sandbox.settle_due(decided_at)  # the network decides
    assert env.deliver(decided_at) >= 1
    won = dispute(env, listed["id"])
    assert won["status"] == "won"
    assert [step["to"] for step in won["history"]] == ["needs_response", "under_review", "won"]
    assert posted(env, merchant) == 5000 - FEE_MINOR  # the amount is back, the fee kept
    again = evidence(env, listed["id"], "more", "ev-2")
    assert (again.status_code, again.json()["error"]) == (409, "dispute_not_open")
    assert again.json()["dispute"]["status"] == "won"
    assert problems(env) == []


def test_accept_loses_it_and_a_second_answer_is_409(env: Env) -> None:
    merchant, listed = opened(env)
    response = accept(env, listed["id"], "acc-1")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "lost"
    assert accept(env, listed["id"], "acc-1").json() == response.json()  # the same key: replayed
    refused = evidence(env, listed["id"], "winning_evidence", "ev-late")
    assert (refused.status_code, refused.json()["error"]) == (409, "dispute_not_open")
    assert refused.json()["dispute"]["status"] == "lost"
    assert evidence(env, listed["id"], "winning_evidence", "ev-late").json() == refused.json()  # recorded
    assert accept(env, listed["id"], "acc-2").status_code == 409
    published = env.client.get("/v1/events", params={"object_id": listed["id"], "type": "dispute.closed"}).json()
    assert [(event["to"], event["cause"]) for event in published["data"]] == [("lost", "api_request")]  # once
    env.deliver(later())  # the processor's dispute.closed: already held, stale
    assert [step["to"] for step in dispute(env, listed["id"])["history"]] == ["needs_response", "lost"]
    assert posted(env, merchant) == 5000 - 5000 - FEE_MINOR  # lost: nothing more moves
    assert problems(env) == []


def test_accepting_an_inquiry_closes_it(env: Env) -> None:
    _, listed = opened(env, type="inquiry")
    assert listed["status"] == "warning_needs_response"
    response = accept(env, listed["id"], "acc-1")
    assert (response.status_code, response.json()["status"]) == (200, "warning_closed")


def test_another_tenants_or_an_unknown_dispute_is_404_and_records_nothing(env: Env) -> None:
    _, listed = opened(env)
    assert accept(env, "dp_unknown", "k-1").status_code == 404
    assert accept(env, listed["id"], "k-1").status_code == 200  # the key stayed free


@pytest.mark.parametrize(
    "body",
    [{}, {"text": ""}, {"text": "x" * 20_001}, {"text": 1}, {"text": "x", "extra": 1}, {"text": "x", "metadata": 1}],
)
def test_a_bad_evidence_body_is_400_and_changes_nothing(env: Env, body: dict[str, Any]) -> None:
    _, listed = opened(env)
    response = env.client.post(f"/v1/disputes/{listed['id']}/evidence", json=body, headers={"Idempotency-Key": "k"})
    assert response.status_code == 400, response.text
    assert dispute(env, listed["id"])["status"] == "needs_response"


def test_a_missing_key_is_refused(env: Env) -> None:
    _, listed = opened(env)
    assert env.client.post(f"/v1/disputes/{listed['id']}/accept").status_code == 400


def test_a_lost_answer_is_202_and_settled_by_the_status_query(env: Env) -> None:
    _, listed = opened(env)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["dispute_evidence"]})
    response = evidence(env, listed["id"], "winning_evidence", "ev-1")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "needs_response"  # as paycore holds it: nothing proven
    found = _held(env, listed["id"])
    assert answers.refresh(env.database, env.processor, found, actor=actors.worker("resolve_disputes")) == "applied"
    settled = dispute(env, listed["id"])
    # under_review; or won already when the held answer outlasted the decision (HTTP transport)
    assert settled["status"] in ("under_review", "won")
    assert [step["cause"] for step in settled["history"]][1:] == ["status_query"] * (len(settled["history"]) - 1)
    retried = evidence(env, listed["id"], "winning_evidence", "ev-1")  # the same request id: deduped
    assert (retried.status_code, retried.json()["status"]) == (200, settled["status"])
    assert evidence(env, listed["id"], "winning_evidence", "ev-1").headers["Idempotent-Replayed"] == "true"
    assert problems(env) == []


def _held(env: Env, dispute_id: str) -> Any:
    with env.database.read() as connection:
        found = disputes.load(connection, TENANT, dispute_id)
    return found


def test_a_lost_answers_key_sent_again_with_another_body_is_refused(env: Env) -> None:
    _, listed = opened(env)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["dispute_evidence"]})
    assert evidence(env, listed["id"], "winning_evidence", "ev-1").status_code == 202
    reused = evidence(env, listed["id"], "losing_evidence", "ev-1")
    assert (reused.status_code, reused.json()["error"]) == (409, "idempotency_key_reused")
