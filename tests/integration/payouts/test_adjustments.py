"""Adjustments and returns (SPEC §11): bank fees and returns with their windows, people's
chargebacks, recoveries and reversals, each bounded by what it corrects, each on the ledger."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.lifecycle.evidence import Evidence
from paycore.payouts import lifecycle, service, states
from paycore.payouts.types import Payout
from paycore.processor.port import PayoutResult
from tests.support.payouts import PATH_TO, balance, books_ok, funded_source, load, move, schedule, system_balance

TENANT = "default"
DAY_US = 86_400_000_000


def settled(database: Database, amount_minor: int = 10_000, *, rail: str = "ach") -> tuple[str, Payout]:
    currency = "USD" if rail == "ach" else "EUR"
    source = funded_source(database, TENANT, 50_000, currency=currency)
    payout = move(database, schedule(database, TENANT, source, amount_minor, rail=rail), *PATH_TO[states.SETTLED])
    return source, payout


def bank_says(database: Database, payout: Payout, status: str, **fields: Any) -> tuple[Payout, str]:
    result = PayoutResult(
        request_id=payout.id,
        status=status,  # type: ignore[arg-type]
        bank_payout_id="bpo_test",
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        rail=payout.rail,  # type: ignore[arg-type]
        **fields,
    )

    def work(connection: Any) -> tuple[Payout, str]:
        current = service.MACHINE.load(connection, payout.tenant_id, payout.id, for_update=True)
        evidence, at_us = Evidence.of_result(result), now_us()
        applied = lifecycle.apply_evidence(connection, current, evidence, cause="test", actor="processor", now_us=at_us)
        return applied.item, applied.reason

    return database.transaction(work)


def adjust(client: TestClient, payout_id: str, key: str, **body: Any) -> Any:
    return client.post(f"/v1/payouts/{payout_id}/adjustments", json=body, headers={"Idempotency-Key": key})


@pytest.mark.parametrize(
    ("rail", "code", "days_after", "applied"),
    [
        ("ach", "R02", 0, True),  # the same day
        ("ach", "R02", 10, False),  # 2 banking days: closed
        ("ach", "R10", 10, True),  # unauthorized: 60 calendar days
        ("ach", "R10", 61, False),
        ("sepa", "AC04", 1, True),
        ("sepa", "AC04", 8, False),  # 3 banking days: closed whatever the weekday
        ("sepa", "FOCR", 20, True),  # recall: 25 banking days
    ],
)
def test_returns_inside_and_outside_their_window(
    database: Database, rail: str, code: str, days_after: int, applied: bool
) -> None:
    source, payout = settled(database, rail=rail)
    assert payout.settled_at_us is not None
    returned_at_us = payout.settled_at_us + days_after * DAY_US
    after, outcome = bank_says(
        database, payout, "returned", return_code=code, return_fee_minor=200, returned_at_us=returned_at_us
    )
    if applied:
        assert (outcome, after.status, after.return_code) == ("applied", states.RETURNED, code)
        assert balance(database, TENANT, source)[0] == 50_000  # the whole amount back on the source
    else:
        assert (outcome, after.status) == ("late", states.SETTLED)
        assert balance(database, TENANT, source)[0] == 40_000
    assert books_ok(database)


def test_a_return_short_of_the_amount_books_the_shortfall_as_a_loss(database: Database) -> None:
    source, payout = settled(database, rail="sepa")
    after, outcome = bank_says(database, payout, "returned", return_code="AC04", return_amount_minor=9_900)
    assert (outcome, after.status) == ("applied", states.RETURNED)
    assert balance(database, TENANT, source)[0] == 50_000
    assert system_balance(database, TENANT, "payouts.losses.EUR") == 100
    assert books_ok(database)


@pytest.mark.parametrize("returned_minor", [0, 10_001])
def test_a_return_of_nothing_or_of_more_than_was_sent_is_never_applied(database: Database, returned_minor: int) -> None:
    _, payout = settled(database)
    after, outcome = bank_says(database, payout, "returned", return_code="R02", return_amount_minor=returned_minor)
    assert (outcome, after.status) == ("mismatch", states.SETTLED)


def test_the_fee_is_booked_on_the_day_the_bank_settled(database: Database, client: TestClient) -> None:
    source = funded_source(database, TENANT, 50_000)
    payout = move(database, schedule(database, TENANT, source, 10_000), *PATH_TO[states.SENT])
    three_days_ago_us = now_us() - 3 * DAY_US
    bank_says(database, payout, "settled", fee_minor=25, settled_at_us=three_days_ago_us)
    [fee] = client.get(f"/v1/payouts/{payout.id}/adjustments").json()["data"]
    expected = dt.datetime.fromtimestamp(three_days_ago_us // 1_000_000, tz=dt.UTC).date().isoformat()
    assert (fee["kind"], fee["amount_minor"], fee["effective_on"]) == ("fee", 25, expected)


def test_people_adjustments_are_bounded_by_what_they_correct(database: Database, client: TestClient) -> None:
    source, payout = settled(database)
    assert adjust(client, payout.id, "cb1", kind="chargeback", amount_minor=10_001).status_code == 409
    assert adjust(client, payout.id, "cb2", kind="chargeback", amount_minor=6_000).status_code == 201
    assert adjust(client, payout.id, "cb2", kind="chargeback", amount_minor=6_000).status_code == 201  # replay
    assert adjust(client, payout.id, "rv1", kind="chargeback_reversal", amount_minor=6_001).status_code == 409
    assert adjust(client, payout.id, "rc1", kind="recovery", amount_minor=6_001).status_code == 409
    assert adjust(client, payout.id, "rc2", kind="recovery", amount_minor=4_000).status_code == 201
    assert adjust(client, payout.id, "rf1", kind="refund", amount_minor=2_001).status_code == 409
    assert adjust(client, payout.id, "fr1", kind="fee_reversal", amount_minor=1).status_code == 409  # no fee yet
    refused = adjust(client, payout.id, "d1", kind="refund", amount_minor=1, effective_on="2026-99-99")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_effective_on"
    later = adjust(client, payout.id, "d2", kind="refund", amount_minor=1, effective_on="2999-01-01")
    assert later.status_code == 400 and later.json()["error"] == "invalid_effective_on"
    listed = client.get(f"/v1/payouts/{payout.id}/adjustments").json()["data"]
    assert [(a["kind"], a["amount_minor"]) for a in listed] == [("chargeback", 6_000), ("recovery", 4_000)]
    assert system_balance(database, TENANT, "payouts.losses.USD") == 2_000
    assert balance(database, TENANT, source)[0] == 36_000  # 50,000 - 10,000 paid out - 4,000 recovered
    assert books_ok(database)


def test_no_adjustment_before_the_money_left(database: Database, client: TestClient) -> None:
    source = funded_source(database, TENANT, 50_000)
    payout = schedule(database, TENANT, source, 10_000)
    refused = adjust(client, payout.id, "early", kind="chargeback", amount_minor=1)
    assert refused.status_code == 409 and refused.json()["status"] == "scheduled"
    assert load(database, payout).status == states.SCHEDULED
