"""The worked examples of docs/ledger.md, run exactly as written, on SQLite and PostgreSQL.

Each test is one example: the same requests through the HTTP API, then the balances the
page states (posted / pending / available), the four cached totals of its tables, and
`paycore ledger verify` on the result. If you change an example in the page, change it
here too (and the other way round).

The chart of accounts (all USD, tenant `default` in local mode):

| code                    | normal | no_overdraft | what it is                                       |
|-------------------------|--------|--------------|--------------------------------------------------|
| `processor.clearing`    | debit  | no           | money the card processor owes us (an asset)      |
| `merchant.m_42`         | credit | yes          | what we owe merchant 42 (a liability)            |
| `merchant.m_77`         | credit | yes          | what we owe merchant 77                          |
| `revenue.fees`          | credit | no           | our fee income                                   |
| `payouts.in_flight`     | credit | no           | money on its way to a merchant's bank            |
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from paycore.credits.service import balance_code, issued_code
from paycore.db.engine import Database
from paycore.kit import clock
from paycore.ledger.models import accounts
from paycore.ledger.verify import verify
from paycore.workers import jobs

CHART = {
    "clearing": ("processor.clearing", "debit", False),
    "m42": ("merchant.m_42", "credit", True),
    "m77": ("merchant.m_77", "credit", True),
    "fees": ("revenue.fees", "credit", False),
    "payouts": ("payouts.in_flight", "credit", False),
}


# ---------------------------------------------------------------------------- helpers


def send(client: TestClient, path: str, body: Any = None, *, key: str | None = None) -> Any:
    """POST with an Idempotency-Key (a fresh one unless given)."""
    headers = {"Idempotency-Key": key or f"doc-{secrets.token_hex(6)}"}
    if body is None:
        return client.post(path, headers=headers)
    return client.post(path, json=body, headers=headers)


def simple(debit: str, credit: str, amount_minor: int, **extra: Any) -> dict[str, Any]:
    body = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"}
    return {**body, **extra}


def transfer(client: TestClient, body: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
    response = send(client, "/v1/transfers", body, key=key)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def balance(client: TestClient, account_id: str) -> tuple[int, int, int]:
    """(posted_minor, pending_minor, available_minor) from GET /v1/accounts/{id}/balance."""
    response = client.get(f"/v1/accounts/{account_id}/balance")
    assert response.status_code == 200, response.text
    body = response.json()
    values = (body["posted_minor"], body["pending_minor"], body["available_minor"])
    assert all(type(value) is int for value in values), body
    return values


def totals(database: Database, account_id: str) -> tuple[int, int, int, int]:
    """(debits_posted, credits_posted, debits_pending, credits_pending), the cached four."""
    columns = (
        accounts.c.debits_posted_minor,
        accounts.c.credits_posted_minor,
        accounts.c.debits_pending_minor,
        accounts.c.credits_pending_minor,
    )
    with database.read() as connection:
        row = connection.execute(select(*columns).where(accounts.c.id == account_id)).one()
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def assert_verified(database: Database) -> None:
    with database.read() as connection:
        report = verify(connection)
    assert report.ok, report.problems


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


@pytest.fixture
def chart(client: TestClient) -> dict[str, str]:
    ids = {}
    for name, (code, normal_balance, no_overdraft) in CHART.items():
        body = {"code": code, "currency": "USD", "normal_balance": normal_balance, "no_overdraft": no_overdraft}
        response = client.post("/v1/accounts", json=body)
        assert response.status_code == 201, response.text
        ids[name] = response.json()["id"]
    return ids


@pytest.fixture
def funded(client: TestClient, chart: dict[str, str]) -> dict[str, str]:
    """Example 1 done: merchant 42 holds 10_000."""
    transfer(client, simple(chart["clearing"], chart["m42"], 10_000), key="fund-m42")
    return chart


class Clock:
    def __init__(self) -> None:
        self.now_us = clock.now_us()

    def __call__(self) -> int:
        return self.now_us


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The request clock and the worker's, moved by hand, so the expiry example needs no sleep."""
    fake = Clock()
    monkeypatch.setattr("paycore.http.idempotent.now_us", fake)
    monkeypatch.setattr("paycore.workers.jobs.now_us", fake)
    yield fake


# ---------------------------------------------------------------------------- the examples


def test_example_1_fund_a_merchant(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    created = transfer(client, simple(chart["clearing"], chart["m42"], 10_000), key="fund-m42")
    assert created["status"] == "posted" and created["amount_minor"] == 10_000

    assert totals(database, chart["clearing"]) == (10_000, 0, 0, 0)
    assert totals(database, chart["m42"]) == (0, 10_000, 0, 0)
    assert balance(client, chart["clearing"]) == (10_000, 0, 10_000)
    assert balance(client, chart["m42"]) == (10_000, 0, 10_000)
    assert_verified(database)


def test_example_2_a_split_payment(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    body: dict[str, Any] = {
        "entries": [
            {"account_id": chart["clearing"], "direction": "debit", "amount_minor": 10_000},
            {"account_id": chart["m77"], "direction": "credit", "amount_minor": 9_700},
            {"account_id": chart["fees"], "direction": "credit", "amount_minor": 300},
        ],
        "reference_type": "payment",
        "reference_id": "pay_example",
    }
    created = transfer(client, body, key="sale-1")
    assert created["status"] == "posted" and created["amount_minor"] == 10_000
    assert len(created["entries"]) == 3

    assert totals(database, chart["clearing"]) == (10_000, 0, 0, 0)
    assert totals(database, chart["m77"]) == (0, 9_700, 0, 0)
    assert totals(database, chart["fees"]) == (0, 300, 0, 0)
    assert balance(client, chart["clearing"]) == (10_000, 0, 10_000)
    assert balance(client, chart["m77"]) == (9_700, 0, 9_700)
    assert balance(client, chart["fees"]) == (300, 0, 300)

    # One cent short on the credit side: refused whole, nothing written.
    short = dict(body, entries=[*body["entries"][:2], dict(body["entries"][2], amount_minor=299)])
    assert_error(send(client, "/v1/transfers", short), 422, "unbalanced_transfer")
    assert balance(client, chart["fees"]) == (300, 0, 300)
    assert_verified(database)


def test_example_3_hold_then_partial_post(client: TestClient, database: Database, funded: dict[str, str]) -> None:
    m42, payouts = funded["m42"], funded["payouts"]
    hold = transfer(client, simple(m42, payouts, 3_000, pending=True), key="payout-1-hold")
    assert hold["status"] == "pending"

    assert totals(database, m42) == (0, 10_000, 3_000, 0)
    assert totals(database, payouts) == (0, 0, 0, 3_000)
    assert balance(client, m42) == (10_000, -3_000, 7_000)
    assert balance(client, payouts) == (0, 3_000, 0)

    response = send(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": 2_000}, key="payout-1-post")
    assert response.status_code == 200, response.text
    posted = response.json()
    assert posted["status"] == "posted" and posted["posted_minor"] == 2_000 and posted["resolved_by"]

    assert totals(database, m42) == (2_000, 10_000, 0, 0)
    assert totals(database, payouts) == (0, 2_000, 0, 0)
    assert balance(client, m42) == (8_000, 0, 8_000)
    assert balance(client, payouts) == (2_000, 0, 2_000)

    # Exactly once: a second post (with another key) is refused.
    assert_error(send(client, f"/v1/transfers/{hold['id']}/post"), 409, "transfer_not_pending")
    assert_verified(database)


def test_example_4_hold_then_void(client: TestClient, database: Database, funded: dict[str, str]) -> None:
    m42, payouts = funded["m42"], funded["payouts"]
    hold = transfer(client, simple(m42, payouts, 4_000, pending=True), key="payout-2-hold")
    assert totals(database, m42) == (0, 10_000, 4_000, 0)
    assert totals(database, payouts) == (0, 0, 0, 4_000)
    assert balance(client, m42) == (10_000, -4_000, 6_000)
    assert balance(client, payouts) == (0, 4_000, 0)

    response = send(client, f"/v1/transfers/{hold['id']}/void", key="payout-2-void")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "voided"

    assert totals(database, m42) == (0, 10_000, 0, 0)
    assert totals(database, payouts) == (0, 0, 0, 0)
    assert balance(client, m42) == (10_000, 0, 10_000)
    assert balance(client, payouts) == (0, 0, 0)

    assert_error(send(client, f"/v1/transfers/{hold['id']}/post"), 409, "transfer_not_pending")
    assert_error(send(client, f"/v1/transfers/{hold['id']}/void"), 409, "transfer_not_pending")
    assert_verified(database)


def test_example_5_overdraft_refusal(client: TestClient, database: Database, funded: dict[str, str]) -> None:
    m42, fees, payouts = funded["m42"], funded["fees"], funded["payouts"]
    transfer(client, simple(m42, payouts, 7_000, pending=True), key="payout-3-hold")
    assert balance(client, m42) == (10_000, -7_000, 3_000)

    refused = send(client, "/v1/transfers", simple(m42, fees, 4_000), key="fee-big")
    assert_error(refused, 422, "insufficient_funds")
    assert totals(database, m42) == (0, 10_000, 7_000, 0)
    assert balance(client, m42) == (10_000, -7_000, 3_000)
    assert balance(client, fees) == (0, 0, 0)

    # The refusal was recorded under its key: the same request replays it, it does not retry it.
    replay = send(client, "/v1/transfers", simple(m42, fees, 4_000), key="fee-big")
    assert_error(replay, 422, "insufficient_funds")
    assert replay.headers["Idempotent-Replayed"] == "true"

    transfer(client, simple(m42, fees, 3_000), key="fee-fits")
    assert totals(database, m42) == (3_000, 10_000, 7_000, 0)
    assert balance(client, m42) == (7_000, -7_000, 0)
    assert balance(client, fees) == (3_000, 0, 3_000)
    assert_verified(database)


def test_example_6_reversal(client: TestClient, database: Database, funded: dict[str, str]) -> None:
    m42, fees = funded["m42"], funded["fees"]
    fee = transfer(client, simple(m42, fees, 250), key="fee-1")
    assert balance(client, m42) == (9_750, 0, 9_750)

    response = send(client, f"/v1/transfers/{fee['id']}/reverse", key="fee-1-reverse")
    assert response.status_code == 201, response.text
    reversal = response.json()
    assert reversal["reverses_id"] == fee["id"] and reversal["status"] == "posted"
    assert {(e["account_id"], e["direction"], e["amount_minor"]) for e in reversal["entries"]} == {
        (fees, "debit", 250),
        (m42, "credit", 250),
    }

    assert totals(database, m42) == (250, 10_250, 0, 0)
    assert totals(database, fees) == (250, 250, 0, 0)
    assert balance(client, m42) == (10_000, 0, 10_000)
    assert balance(client, fees) == (0, 0, 0)

    assert_error(send(client, f"/v1/transfers/{fee['id']}/reverse"), 409, "transfer_not_reversible")
    assert_verified(database)


def test_example_7_batch_all_or_nothing(client: TestClient, database: Database, funded: dict[str, str]) -> None:
    m42, m77, fees = funded["m42"], funded["m77"], funded["fees"]
    first = {"transfers": [simple(m42, m77, 6_000), simple(m77, fees, 500)]}
    response = send(client, "/v1/transfers/batch", first, key="batch-1")
    assert response.status_code == 201, response.text
    batch = response.json()
    assert [t["status"] for t in batch["transfers"]] == ["posted", "posted"]
    assert all(t["batch_id"] == batch["id"] for t in batch["transfers"])

    assert totals(database, m42) == (6_000, 10_000, 0, 0)
    assert totals(database, m77) == (500, 6_000, 0, 0)
    assert totals(database, fees) == (0, 500, 0, 0)
    assert balance(client, m42) == (4_000, 0, 4_000)
    assert balance(client, m77) == (5_500, 0, 5_500)
    assert balance(client, fees) == (500, 0, 500)

    second = {"transfers": [simple(m42, m77, 1_000), simple(m77, fees, 9_000)]}
    refused = send(client, "/v1/transfers/batch", second, key="batch-2")
    assert_error(refused, 422, "insufficient_funds")
    assert refused.json()["param"] == "transfers[1].entries"
    assert totals(database, m77) == (500, 6_000, 0, 0)

    assert balance(client, m42) == (4_000, 0, 4_000)
    assert balance(client, m77) == (5_500, 0, 5_500)
    assert balance(client, fees) == (500, 0, 500)
    assert_verified(database)


def test_example_8_a_hold_expires(
    client: TestClient, database: Database, funded: dict[str, str], fake_clock: Clock
) -> None:
    m42, payouts = funded["m42"], funded["payouts"]
    expires_at = clock.to_rfc3339(fake_clock.now_us + 60 * 1_000_000)
    hold = transfer(client, simple(m42, payouts, 1_500, pending=True, expires_at=expires_at), key="payout-4-hold")
    assert totals(database, m42) == (0, 10_000, 1_500, 0)
    assert balance(client, m42) == (10_000, -1_500, 8_500)
    assert balance(client, payouts) == (0, 1_500, 0)

    fake_clock.now_us += 61 * 1_000_000  # a minute later
    assert_error(send(client, f"/v1/transfers/{hold['id']}/post"), 409, "transfer_expired")

    assert jobs.expire_pending_transfers(database, 100) == 1  # what `paycore worker` runs
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "expired"
    assert totals(database, m42) == (0, 10_000, 0, 0)
    assert totals(database, payouts) == (0, 0, 0, 0)
    assert balance(client, m42) == (10_000, 0, 10_000)
    assert balance(client, payouts) == (0, 0, 0)
    assert_verified(database)


def test_example_9_tenant_credits(client: TestClient, database: Database) -> None:
    lines = [
        {"desc": "starter pack", "amount_minor": 500, "currency": "USD"},
        {"desc": "referral bonus", "amount_minor": 250, "currency": "USD"},
    ]
    body = {"idempotency_key": "grant-2026-11", "lines": lines}
    first = client.post("/v1/tenants/acme/credits", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["amount_minor"] == 750

    replay = client.post("/v1/tenants/acme/credits", json=body)
    assert replay.status_code == 200 and replay.json() == first.json()
    changed = {"idempotency_key": "grant-2026-11", "lines": lines[:1]}
    assert_error(client.post("/v1/tenants/acme/credits", json=changed), 409, "idempotency_key_reused")

    assert client.get("/v1/tenants/acme/balance").json() == {"currency": "USD", "amount_minor": 750}
    with database.read() as connection:
        by_code = {
            row.code: row for row in connection.execute(select(accounts).where(accounts.c.tenant_id == "acme")).all()
        }
    balance_account, issued_account = by_code[balance_code("USD")], by_code[issued_code("USD")]
    assert (balance_account.normal_balance, bool(balance_account.no_overdraft)) == ("credit", True)
    assert (issued_account.normal_balance, bool(issued_account.no_overdraft)) == ("debit", False)
    assert totals(database, balance_account.id) == (0, 750, 0, 0)
    assert totals(database, issued_account.id) == (750, 0, 0, 0)
    assert_verified(database)
