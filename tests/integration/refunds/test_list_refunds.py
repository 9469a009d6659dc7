"""GET /v1/refunds (issue 20, point 5): every refund of the tenant across its payments, oldest
first, filtered by status, so that refunds in doubt can be listed like payments and payouts.
On both databases; one transport is enough (the processor is only needed to make a refund in
doubt)."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.refunds import states
from paycore.refunds.models import STATUSES
from tests.integration.payments.conftest import Env
from tests.integration.refunds import support
from tests.integration.refunds.support import created, paid

OTHER = {"Paycore-Tenant": "other"}


@pytest.fixture
def transport() -> str:
    return "inprocess"


def listed(env: Env, **params: Any) -> tuple[list[str], bool]:
    response = env.client.get("/v1/refunds", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list"
    return [item["id"] for item in body["data"]], body["has_more"]


def test_every_refund_of_the_tenant_oldest_first_in_pages(env: Env) -> None:
    _, first_payment = paid(env)
    _, second_payment = paid(env)
    ids = [
        created(env, first_payment, 100)["id"],
        created(env, second_payment, 200)["id"],
        created(env, first_payment, 300)["id"],
    ]

    assert listed(env) == (ids, False)
    assert listed(env, limit=2) == (ids[:2], True)
    assert listed(env, limit=2, starting_after=ids[1]) == (ids[2:], False)
    item = env.client.get("/v1/refunds", params={"limit": 1}).json()["data"][0]
    assert "history" not in item
    assert {key: item[key] for key in ("object", "payment", "amount_minor", "status")} == {
        "object": "refund",
        "payment": first_payment,
        "amount_minor": 100,
        "status": "pending",
    }


def test_status_in_doubt_lists_the_refunds_awaiting_the_processor(env: Env) -> None:
    _, payment = paid(env)
    sent_fine = created(env, payment, 100)["id"]
    support.send(env)
    lost = created(env, payment, 200)["id"]
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["refund"]})
    support.send(env)
    waiting = created(env, payment, 300)["id"]

    assert listed(env, status="in_doubt") == ([lost], False)
    assert listed(env, status="succeeded") == ([sent_fine], False)
    assert listed(env, status="pending") == ([waiting], False)
    assert listed(env, status="failed") == ([], False)

    support.resolve(env)
    assert listed(env, status="in_doubt") == ([], False)
    assert listed(env, status="succeeded") == ([sent_fine, lost], False)


def test_a_status_that_is_not_one_and_a_foreign_cursor_are_refused(env: Env) -> None:
    _, payment = paid(env)
    mine = created(env, payment, 100)["id"]
    for bad in ("settled", "IN_DOUBT", ""):
        response = env.client.get("/v1/refunds", params={"status": bad})
        assert (response.status_code, response.json()["error"]) == (400, "invalid_request"), bad
        assert response.json()["param"] == "status"
    for limit in (0, 101):
        assert env.client.get("/v1/refunds", params={"limit": limit}).status_code == 400
    response = env.client.get("/v1/refunds", params={"starting_after": "rf_unknown"})
    assert (response.status_code, response.json()["param"]) == (400, "starting_after")
    response = env.client.get("/v1/refunds", params={"starting_after": mine}, headers=OTHER)
    assert (response.status_code, response.json()["param"]) == (400, "starting_after")


def test_one_tenant_never_sees_another_ones_refunds(env: Env) -> None:
    _, payment = paid(env)
    mine = created(env, payment, 100)["id"]

    assert env.client.get("/v1/refunds", headers=OTHER).json()["data"] == []
    assert listed(env) == ([mine], False)


def test_the_documented_statuses_are_the_stored_ones() -> None:
    assert states.STATUSES == STATUSES
