"""SPEC §4: the ledger over HTTP, on both databases.

The chart used throughout: `cash` is a debit-normal asset (the money's source, may go
negative in these tests), `alice` and `bob` are credit-normal customer balances with
`no_overdraft`, funded from cash.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.ledger import repository
from paycore.workers import jobs

ACCOUNT_FIELDS = {"id", "code", "currency", "normal_balance", "no_overdraft", "metadata", "created_at"}
AMOUNT_MAX = 2**53 - 1


# ---------------------------------------------------------------------------- helpers


def new_key() -> str:
    return "k-" + secrets.token_hex(8)


def create_account(
    client: TestClient,
    code: str,
    *,
    currency: str = "USD",
    normal_balance: str = "credit",
    no_overdraft: bool = False,
    headers: dict[str, str] | None = None,
) -> str:
    body = {"code": code, "currency": currency, "normal_balance": normal_balance, "no_overdraft": no_overdraft}
    response = client.post("/v1/accounts", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def post(client: TestClient, path: str, body: Any = None, *, key: str | None = None) -> Response:
    headers = {"Idempotency-Key": key or new_key()}
    if body is None:
        return client.post(path, headers=headers)
    return client.post(path, json=body, headers=headers)


def move(client: TestClient, debit: str, credit: str, amount_minor: int, **extra: Any) -> Response:
    body = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"}
    return post(client, "/v1/transfers", {**body, **extra})


def moved(client: TestClient, debit: str, credit: str, amount_minor: int, **extra: Any) -> dict[str, Any]:
    response = move(client, debit, credit, amount_minor, **extra)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def balance(client: TestClient, account_id: str) -> tuple[int, int, int]:
    """(posted, pending, available), each checked to be a JSON integer."""
    response = client.get(f"/v1/accounts/{account_id}/balance")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"account_id", "currency", "posted_minor", "pending_minor", "available_minor"}
    assert body["account_id"] == account_id
    values = (body["posted_minor"], body["pending_minor"], body["available_minor"])
    assert all(type(value) is int for value in values), body
    return values


def ledger_counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return repository.count_rows(connection)


def assert_error(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


@pytest.fixture
def chart(client: TestClient) -> dict[str, str]:
    """cash (debit-normal) has funded alice with 1000; bob is empty."""
    accounts = {
        "cash": create_account(client, "cash", normal_balance="debit"),
        "alice": create_account(client, "alice", no_overdraft=True),
        "bob": create_account(client, "bob", no_overdraft=True),
    }
    moved(client, accounts["cash"], accounts["alice"], 1000)
    return accounts


class Clock:
    """The request clock (and the worker's), moved by hand so expiry tests need no sleeping."""

    def __init__(self) -> None:
        self.now = clock.now_us()

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += seconds * 1_000_000


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr("paycore.http.idempotent.now_us", fake)
    monkeypatch.setattr("paycore.workers.jobs.now_us", fake)
    yield fake


# ---------------------------------------------------------------------------- accounts


def test_create_account_is_201_with_its_fields(client: TestClient) -> None:
    body = {
        "code": "merchant.42",
        "currency": "EUR",
        "normal_balance": "credit",
        "no_overdraft": True,
        "metadata": {"owner": "m42"},
    }
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.text
    account = response.json()
    assert set(account) >= ACCOUNT_FIELDS
    assert account["id"].startswith("acct_")
    assert account["code"] == "merchant.42" and account["currency"] == "EUR"
    assert account["normal_balance"] == "credit" and account["no_overdraft"] is True
    assert account["metadata"] == {"owner": "m42"}
    assert account["created_at"].endswith("Z")
    fetched = client.get(f"/v1/accounts/{account['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == account


def test_a_new_account_has_zero_balances(client: TestClient) -> None:
    account_id = create_account(client, "empty", currency="JPY")
    assert balance(client, account_id) == (0, 0, 0)
    assert client.get(f"/v1/accounts/{account_id}/balance").json()["currency"] == "JPY"


def test_duplicate_code_is_409_account_exists(client: TestClient, database: Database) -> None:
    create_account(client, "dup")
    before = ledger_counts(database)
    response = client.post("/v1/accounts", json={"code": "dup", "currency": "EUR", "normal_balance": "debit"})
    assert_error(response, 409, "account_exists")
    assert ledger_counts(database) == before


@pytest.mark.parametrize("path", ["/v1/accounts/acct_nope", "/v1/accounts/acct_nope/balance"])
def test_unknown_account_is_404(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404, "account_not_found")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"code": "x", "currency": "XXX", "normal_balance": "credit"}, "unsupported_currency"),
        ({"code": "x", "currency": "USD", "normal_balance": "sideways"}, "invalid_request"),
        ({"code": "", "currency": "USD", "normal_balance": "credit"}, "invalid_request"),
        ({"code": "x", "currency": "USD", "normal_balance": "credit", "no_overdraft": "yes"}, "invalid_request"),
        ({"code": "x", "currency": "USD", "normal_balance": "credit", "metadata": {"n": 1}}, "invalid_request"),
        ({"code": "x", "currency": "USD", "normal_balance": "credit", "extra": 1}, "invalid_request"),
    ],
)
def test_bad_account_bodies_are_400(client: TestClient, database: Database, body: Any, code: str) -> None:
    before = ledger_counts(database)
    assert_error(client.post("/v1/accounts", json=body), 400, code)
    assert ledger_counts(database) == before


# ---------------------------------------------------------------------------- transfers


def test_simple_transfer_is_201_and_moves_the_money(client: TestClient, chart: dict[str, str]) -> None:
    transfer = moved(client, chart["alice"], chart["bob"], 250, metadata={"order": "o1"})
    assert transfer["id"].startswith("txn_")
    assert transfer["status"] == "posted"
    assert transfer["amount_minor"] == 250 and transfer["currency"] == "USD"
    assert transfer["metadata"] == {"order": "o1"}
    assert transfer["created_at"].endswith("Z")
    legs = {(e["account_id"], e["direction"], e["amount_minor"]) for e in transfer["entries"]}
    assert legs == {(chart["alice"], "debit", 250), (chart["bob"], "credit", 250)}
    assert all(e["transfer_id"] == transfer["id"] and e["currency"] == "USD" for e in transfer["entries"])
    assert balance(client, chart["alice"]) == (750, 0, 750)
    assert balance(client, chart["bob"]) == (250, 0, 250)
    assert balance(client, chart["cash"]) == (1000, 0, 1000)
    # What was answered is what was stored (read back through another path).
    fetched = client.get(f"/v1/transfers/{transfer['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == transfer


def test_multi_entry_transfer_is_201(client: TestClient, chart: dict[str, str]) -> None:
    fees = create_account(client, "fees")
    entries = [
        {"account_id": chart["alice"], "direction": "debit", "amount_minor": 300},
        {"account_id": chart["bob"], "direction": "credit", "amount_minor": 290},
        {"account_id": fees, "direction": "credit", "amount_minor": 10},
    ]
    response = post(client, "/v1/transfers", {"entries": entries, "metadata": {"kind": "split"}})
    assert response.status_code == 201, response.text
    transfer = response.json()
    assert transfer["id"].startswith("txn_") and transfer["status"] == "posted"
    assert len(transfer["entries"]) == 3
    assert [(e["account_id"], e["direction"], e["amount_minor"]) for e in transfer["entries"]] == [
        (e["account_id"], e["direction"], e["amount_minor"]) for e in entries
    ]
    assert balance(client, chart["alice"]) == (700, 0, 700)
    assert balance(client, chart["bob"]) == (290, 0, 290)
    assert balance(client, fees) == (10, 0, 10)


def test_insufficient_funds_is_422_and_writes_nothing(
    client: TestClient, database: Database, chart: dict[str, str]
) -> None:
    before = ledger_counts(database)
    response = move(client, chart["alice"], chart["bob"], 1001)
    assert_error(response, 422, "insufficient_funds")
    assert ledger_counts(database) == before
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)
    # Exactly the available amount is fine.
    moved(client, chart["alice"], chart["bob"], 1000)
    assert balance(client, chart["alice"]) == (0, 0, 0)


def test_insufficient_funds_counts_every_leg_on_one_account(
    client: TestClient, database: Database, chart: dict[str, str]
) -> None:
    """Two debits of 600 on a 1000 balance: each alone fits, together they do not."""
    entries = [
        {"account_id": chart["alice"], "direction": "debit", "amount_minor": 600},
        {"account_id": chart["alice"], "direction": "debit", "amount_minor": 600},
        {"account_id": chart["bob"], "direction": "credit", "amount_minor": 1200},
    ]
    before = ledger_counts(database)
    assert_error(post(client, "/v1/transfers", {"entries": entries}), 422, "insufficient_funds")
    assert ledger_counts(database) == before


def test_unbalanced_transfer_is_422(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    entries = [
        {"account_id": chart["cash"], "direction": "debit", "amount_minor": 100},
        {"account_id": chart["bob"], "direction": "credit", "amount_minor": 99},
    ]
    before = ledger_counts(database)
    assert_error(post(client, "/v1/transfers", {"entries": entries}), 422, "unbalanced_transfer")
    assert ledger_counts(database) == before


def test_entries_in_two_currencies_must_balance_in_each(client: TestClient, chart: dict[str, str]) -> None:
    euros = create_account(client, "euros", currency="EUR")
    entries = [
        {"account_id": chart["cash"], "direction": "debit", "amount_minor": 100},
        {"account_id": euros, "direction": "credit", "amount_minor": 100},
    ]
    assert_error(post(client, "/v1/transfers", {"entries": entries}), 422, "unbalanced_transfer")


@pytest.mark.parametrize("case", ["declared_currency", "account_currencies"])
def test_currency_mismatch_is_422(client: TestClient, database: Database, chart: dict[str, str], case: str) -> None:
    if case == "declared_currency":
        body = {"debit_account_id": chart["alice"], "credit_account_id": chart["bob"], "amount_minor": 1}
        body["currency"] = "EUR"
    else:
        euros = create_account(client, "euros", currency="EUR")
        body = {"debit_account_id": chart["alice"], "credit_account_id": euros, "amount_minor": 1, "currency": "USD"}
    before = ledger_counts(database)
    assert_error(post(client, "/v1/transfers", body), 422, "currency_mismatch")
    assert ledger_counts(database) == before


@pytest.mark.parametrize("side", ["debit_account_id", "credit_account_id"])
def test_unknown_account_in_a_transfer_is_404(
    client: TestClient, database: Database, chart: dict[str, str], side: str
) -> None:
    body: dict[str, Any] = {
        "debit_account_id": chart["alice"],
        "credit_account_id": chart["bob"],
        "amount_minor": 1,
        "currency": "USD",
    }
    body[side] = "acct_nope"
    before = ledger_counts(database)
    assert_error(post(client, "/v1/transfers", body), 404, "account_not_found")
    assert ledger_counts(database) == before


def test_missing_idempotency_key_is_400(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    body = {"debit_account_id": chart["alice"], "credit_account_id": chart["bob"], "amount_minor": 1, "currency": "USD"}
    before = ledger_counts(database)
    assert_error(client.post("/v1/transfers", json=body), 400, "idempotency_key_required")
    assert ledger_counts(database) == before


@pytest.mark.parametrize(
    "path", ["/v1/transfers/txn_x/post", "/v1/transfers/txn_x/void", "/v1/transfers/txn_x/reverse"]
)
def test_every_money_moving_post_requires_a_key(client: TestClient, path: str) -> None:
    assert_error(client.post(path), 400, "idempotency_key_required")


def test_batch_requires_a_key(client: TestClient, chart: dict[str, str]) -> None:
    body: dict[str, Any] = {"transfers": [{"debit_account_id": chart["alice"], "credit_account_id": chart["bob"]}]}
    body["transfers"][0].update(amount_minor=1, currency="USD")
    assert_error(client.post("/v1/transfers/batch", json=body), 400, "idempotency_key_required")


BAD_AMOUNTS = [True, False, 1.0, 0.1, "199", None, 0, -1, 2**53]


@pytest.mark.parametrize("shape", ["simple", "entries", "batch"])
def test_bad_amounts_are_400_invalid_amount(
    client: TestClient, database: Database, chart: dict[str, str], shape: str
) -> None:
    simple = {"debit_account_id": chart["cash"], "credit_account_id": chart["bob"], "currency": "USD"}
    before = ledger_counts(database)
    for amount in BAD_AMOUNTS:  # one database for all of them: each must change nothing
        if shape == "entries":
            body: dict[str, Any] = {
                "entries": [
                    {"account_id": chart["cash"], "direction": "debit", "amount_minor": amount},
                    {"account_id": chart["bob"], "direction": "credit", "amount_minor": amount},
                ]
            }
            path = "/v1/transfers"
        elif shape == "batch":
            body = {"transfers": [{**simple, "amount_minor": 5}, {**simple, "amount_minor": amount}]}
            path = "/v1/transfers/batch"
        else:
            body = {**simple, "amount_minor": amount}
            path = "/v1/transfers"
        response = post(client, path, body, key="same-key-for-all")
        assert response.status_code == 400, (amount, response.text)
        assert response.json()["error"] == "invalid_amount", (amount, response.text)
        assert "amount_minor" in response.json().get("param", ""), (amount, response.text)
        assert ledger_counts(database) == before, amount
    assert balance(client, chart["bob"]) == (0, 0, 0)


def test_the_largest_amount_is_accepted_and_exact(client: TestClient) -> None:
    source = create_account(client, "source", normal_balance="debit")
    sink = create_account(client, "sink")
    transfer = moved(client, source, sink, AMOUNT_MAX)
    assert transfer["amount_minor"] == AMOUNT_MAX
    assert balance(client, sink) == (AMOUNT_MAX, 0, AMOUNT_MAX)


def test_a_transfer_whose_legs_add_up_past_2_53_is_refused(client: TestClient, database: Database) -> None:
    """Each leg is a valid amount but the transfer's total is not readable exactly by a JSON client."""
    source = create_account(client, "source", normal_balance="debit")
    sink = create_account(client, "sink")
    entries = [
        {"account_id": source, "direction": "debit", "amount_minor": AMOUNT_MAX},
        {"account_id": source, "direction": "debit", "amount_minor": 1},
        {"account_id": sink, "direction": "credit", "amount_minor": AMOUNT_MAX},
        {"account_id": sink, "direction": "credit", "amount_minor": 1},
    ]
    before = ledger_counts(database)
    assert_error(post(client, "/v1/transfers", {"entries": entries}), 400, "invalid_amount")
    assert ledger_counts(database) == before


def test_balances_past_the_64_bit_range_are_refused_not_500(client: TestClient, database: Database) -> None:
    """Cached totals are signed 64-bit. A transfer that would carry one past 2^63-1 is a 422
    that writes nothing (PostgreSQL would otherwise raise "bigint out of range": a 500). The
    total is put near the edge by hand; 1025 real transfers of 2^53-1 would get there too.
    Its debits are set 1,000 below its credits, so its balance stays under the 2^53 - 1 limit
    (`balance_limit_exceeded`, tested below) while the credits total reaches the edge."""
    source = create_account(client, "source", normal_balance="debit")
    sink = create_account(client, "sink")
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text(
                "UPDATE ledger_accounts SET credits_posted_minor = :total, debits_posted_minor = :total - 1000"
                " WHERE id = :id"
            ),
            {"total": 2**63 - 1 - 100, "id": sink},
        )
        # The source gives up to 2^53 - 1 below; its credits start there so its balance stays in range.
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE id = :id"),
            {"total": 2**53 - 1, "id": source},
        )
    moved(client, source, sink, 100)  # exactly to the edge is fine
    before = ledger_counts(database)
    assert_error(move(client, source, sink, 1), 422, "balance_overflow")
    one = {"debit_account_id": source, "credit_account_id": sink, "amount_minor": AMOUNT_MAX, "currency": "USD"}
    assert_error(post(client, "/v1/transfers/batch", {"transfers": [one]}), 422, "balance_overflow")
    assert ledger_counts(database) == before
    assert balance(client, sink)[0] == 1_100
    with database.read() as connection:
        total = connection.execute(
            text("SELECT credits_posted_minor FROM ledger_accounts WHERE id = :id"), {"id": sink}
        ).scalar_one()
    assert total == 2**63 - 1


def test_a_balance_past_2_53_minus_1_is_a_422_that_writes_nothing(client: TestClient, database: Database) -> None:
    """Issue 18: two credits of (2^53 - 1) / 2 + 1 reached 9007199254740992, which a
    JavaScript client reads as 9007199254740992 and 9007199254740993 alike."""
    source = create_account(client, "source", normal_balance="debit")
    sink = create_account(client, "sink")
    half = AMOUNT_MAX // 2 + 1
    moved(client, source, sink, half)
    before = ledger_counts(database)
    response = move(client, source, sink, half)
    assert_error(response, 422, "balance_limit_exceeded")
    assert "2^53 - 1" in response.json()["message"]
    one = {"debit_account_id": source, "credit_account_id": sink, "amount_minor": half, "currency": "USD"}
    assert_error(post(client, "/v1/transfers/batch", {"transfers": [one]}), 422, "balance_limit_exceeded")
    assert ledger_counts(database) == before
    assert balance(client, sink)[0] == half


def test_get_unknown_transfer_is_404(client: TestClient) -> None:
    assert_error(client.get("/v1/transfers/txn_nope"), 404, "transfer_not_found")


# ---------------------------------------------------------------------------- two-phase


def test_pending_transfer_is_held_not_available(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    assert hold["status"] == "pending" and hold["id"].startswith("txn_")
    # alice: the hold is a pending debit, so 300 of her 1000 is no longer available.
    assert balance(client, chart["alice"]) == (1000, -300, 700)
    # bob: an incoming hold is pending, not spendable yet.
    assert balance(client, chart["bob"]) == (0, 300, 0)
    # Holds count against no_overdraft: alice can spend 700 more, not 701.
    assert_error(move(client, chart["alice"], chart["bob"], 701), 422, "insufficient_funds")
    assert_error(move(client, chart["alice"], chart["bob"], 701, pending=True), 422, "insufficient_funds")
    assert move(client, chart["alice"], chart["bob"], 700).status_code == 201


def test_post_in_full(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    response = post(client, f"/v1/transfers/{hold['id']}/post")
    assert response.status_code == 200, response.text
    posted = response.json()
    assert posted["id"] == hold["id"] and posted["status"] == "posted"
    assert posted["posted_minor"] == 300 and posted["resolved_by"].startswith("txn_")
    assert balance(client, chart["alice"]) == (700, 0, 700)
    assert balance(client, chart["bob"]) == (300, 0, 300)
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "posted"
    resolution = client.get(f"/v1/transfers/{posted['resolved_by']}").json()
    assert resolution["pending_id"] == hold["id"]


def test_post_partially(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    response = post(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": 120})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "posted" and response.json()["posted_minor"] == 120
    # The rest of the hold is released.
    assert balance(client, chart["alice"]) == (880, 0, 880)
    assert balance(client, chart["bob"]) == (120, 0, 120)


def test_post_more_than_the_hold_is_refused(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    before = ledger_counts(database)
    response = post(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": 301})
    assert_error(response, 422, "post_amount_exceeds_pending")
    assert ledger_counts(database) == before
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "pending"


def test_post_with_a_bad_amount_is_400(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    for amount in BAD_AMOUNTS:
        response = post(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": amount})
        assert response.status_code == 400, (amount, response.text)
        assert response.json()["error"] == "invalid_amount", (amount, response.text)
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "pending"
    assert balance(client, chart["bob"]) == (0, 300, 0)


def test_void_releases_the_hold(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    response = post(client, f"/v1/transfers/{hold['id']}/void")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "voided"
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)


@pytest.mark.parametrize("first", ["post", "void"])
@pytest.mark.parametrize("second", ["post", "void"])
def test_a_hold_resolves_exactly_once(
    client: TestClient, database: Database, chart: dict[str, str], first: str, second: str
) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    assert post(client, f"/v1/transfers/{hold['id']}/{first}").status_code == 200
    before = ledger_counts(database)
    balances = (balance(client, chart["alice"]), balance(client, chart["bob"]))
    error = assert_error(post(client, f"/v1/transfers/{hold['id']}/{second}"), 409, "transfer_not_pending")
    assert error["status"] == ("posted" if first == "post" else "voided")
    assert ledger_counts(database) == before
    assert (balance(client, chart["alice"]), balance(client, chart["bob"])) == balances


def test_post_or_void_of_a_plain_transfer_is_409(client: TestClient, chart: dict[str, str]) -> None:
    transfer = moved(client, chart["alice"], chart["bob"], 10)
    for action in ("post", "void"):
        assert_error(post(client, f"/v1/transfers/{transfer['id']}/{action}"), 409, "transfer_not_pending")


@pytest.mark.parametrize("action", ["post", "void", "reverse"])
def test_actions_on_an_unknown_transfer_are_404(client: TestClient, action: str) -> None:
    assert_error(post(client, f"/v1/transfers/txn_nope/{action}"), 404, "transfer_not_found")


def test_partial_post_of_a_multi_entry_hold_is_refused(client: TestClient, chart: dict[str, str]) -> None:
    fees = create_account(client, "fees")
    entries = [
        {"account_id": chart["alice"], "direction": "debit", "amount_minor": 300},
        {"account_id": chart["bob"], "direction": "credit", "amount_minor": 290},
        {"account_id": fees, "direction": "credit", "amount_minor": 10},
    ]
    hold = post(client, "/v1/transfers", {"entries": entries, "pending": True}).json()
    assert hold["status"] == "pending"
    response = post(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": 100})
    assert_error(response, 422, "partial_post_unsupported")
    # Posting in full works.
    assert post(client, f"/v1/transfers/{hold['id']}/post").status_code == 200
    assert balance(client, fees) == (10, 0, 10)


def test_expired_hold_cannot_be_posted_and_the_worker_voids_it(
    client: TestClient, database: Database, chart: dict[str, str], fake_clock: Clock
) -> None:
    expires_at = clock.to_rfc3339(fake_clock.now + 60_000_000)
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True, expires_at=expires_at)
    assert hold["expires_at"] == expires_at
    assert jobs.expire_pending_transfers(database, 100) == 0  # not due yet
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "pending"

    fake_clock.advance(60)
    assert_error(post(client, f"/v1/transfers/{hold['id']}/post"), 409, "transfer_expired")
    assert balance(client, chart["alice"]) == (1000, -300, 700)  # still held until the worker runs

    assert jobs.expire_pending_transfers(database, 100) == 1
    assert client.get(f"/v1/transfers/{hold['id']}").json()["status"] == "expired"
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)
    assert jobs.expire_pending_transfers(database, 100) == 0
    assert_error(post(client, f"/v1/transfers/{hold['id']}/void"), 409, "transfer_not_pending")


def test_the_worker_leaves_resolved_and_unexpiring_holds_alone(
    client: TestClient, database: Database, chart: dict[str, str], fake_clock: Clock
) -> None:
    soon = clock.to_rfc3339(fake_clock.now + 1_000_000)
    posted = moved(client, chart["alice"], chart["bob"], 100, pending=True, expires_at=soon)
    assert post(client, f"/v1/transfers/{posted['id']}/post").status_code == 200
    forever = moved(client, chart["alice"], chart["bob"], 100, pending=True)
    fake_clock.advance(3600)
    assert jobs.expire_pending_transfers(database, 100) == 0
    assert client.get(f"/v1/transfers/{posted['id']}").json()["status"] == "posted"
    assert client.get(f"/v1/transfers/{forever['id']}").json()["status"] == "pending"


@pytest.mark.parametrize(
    "expires_at", ["2000-01-01T00:00:00Z", "tomorrow", "2030-01-01T00:00:00"], ids=["past", "garbage", "no_offset"]
)
def test_bad_expiry_is_400(client: TestClient, database: Database, chart: dict[str, str], expires_at: str) -> None:
    before = ledger_counts(database)
    assert_error(
        move(client, chart["alice"], chart["bob"], 1, pending=True, expires_at=expires_at), 400, "invalid_request"
    )
    assert ledger_counts(database) == before


def test_expiry_needs_a_pending_transfer(client: TestClient, chart: dict[str, str]) -> None:
    response = move(client, chart["alice"], chart["bob"], 1, expires_at="2999-01-01T00:00:00Z")
    assert_error(response, 400, "invalid_request")


# ---------------------------------------------------------------------------- reversals


def test_reverse_undoes_a_transfer_once(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    transfer = moved(client, chart["alice"], chart["bob"], 200)
    response = post(client, f"/v1/transfers/{transfer['id']}/reverse")
    assert response.status_code == 201, response.text
    reversal = response.json()
    assert reversal["id"].startswith("txn_") and reversal["id"] != transfer["id"]
    assert reversal["reverses_id"] == transfer["id"] and reversal["status"] == "posted"
    legs = {(e["account_id"], e["direction"], e["amount_minor"]) for e in reversal["entries"]}
    assert legs == {(chart["alice"], "credit", 200), (chart["bob"], "debit", 200)}
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)
    assert client.get(f"/v1/transfers/{reversal['id']}").json() == reversal

    before = ledger_counts(database)
    assert_error(post(client, f"/v1/transfers/{transfer['id']}/reverse"), 409, "transfer_not_reversible")
    assert ledger_counts(database) == before
    assert balance(client, chart["alice"]) == (1000, 0, 1000)


def test_reversal_that_would_overdraw_is_422(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    transfer = moved(client, chart["alice"], chart["bob"], 200)
    moved(client, chart["bob"], chart["alice"], 150)  # bob spent most of it
    before = ledger_counts(database)
    assert_error(post(client, f"/v1/transfers/{transfer['id']}/reverse"), 422, "insufficient_funds")
    assert ledger_counts(database) == before


def test_an_open_or_voided_hold_is_not_reversible(client: TestClient, chart: dict[str, str]) -> None:
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    assert_error(post(client, f"/v1/transfers/{hold['id']}/reverse"), 409, "transfer_not_reversible")
    assert post(client, f"/v1/transfers/{hold['id']}/void").status_code == 200
    assert_error(post(client, f"/v1/transfers/{hold['id']}/reverse"), 409, "transfer_not_reversible")
    assert balance(client, chart["alice"]) == (1000, 0, 1000)


def test_a_posted_hold_is_reversed_once_by_either_id(client: TestClient, chart: dict[str, str]) -> None:
    """A hold shows status `posted` once posted, so reversing it by its id reverses its post;
    reversing the post's own id afterwards is refused (one reversal, whichever id is used)."""
    hold = moved(client, chart["alice"], chart["bob"], 300, pending=True)
    posted = post(client, f"/v1/transfers/{hold['id']}/post", {"amount_minor": 250}).json()
    response = post(client, f"/v1/transfers/{hold['id']}/reverse")
    assert response.status_code == 201, response.text
    reversal = response.json()
    assert reversal["reverses_id"] == posted["resolved_by"]
    assert {(e["account_id"], e["direction"], e["amount_minor"]) for e in reversal["entries"]} == {
        (chart["alice"], "credit", 250),
        (chart["bob"], "debit", 250),
    }
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)
    assert_error(post(client, f"/v1/transfers/{posted['resolved_by']}/reverse"), 409, "transfer_not_reversible")
    assert_error(post(client, f"/v1/transfers/{hold['id']}/reverse"), 409, "transfer_not_reversible")


# ---------------------------------------------------------------------------- batches


def test_batch_applies_every_transfer(client: TestClient, chart: dict[str, str]) -> None:
    body = {
        "transfers": [
            {
                "debit_account_id": chart["alice"],
                "credit_account_id": chart["bob"],
                "amount_minor": 600,
                "currency": "USD",
            },
            # The second transfer sees the first: bob spends what he just received.
            {
                "debit_account_id": chart["bob"],
                "credit_account_id": chart["cash"],
                "amount_minor": 500,
                "currency": "USD",
            },
        ]
    }
    response = post(client, "/v1/transfers/batch", body)
    assert response.status_code == 201, response.text
    batch = response.json()
    assert len(batch["transfers"]) == 2
    assert {t["batch_id"] for t in batch["transfers"]} == {batch["id"]}
    assert all(t["id"].startswith("txn_") and t["status"] == "posted" for t in batch["transfers"])
    assert balance(client, chart["alice"]) == (400, 0, 400)
    assert balance(client, chart["bob"]) == (100, 0, 100)


@pytest.mark.parametrize(
    ("bad", "status", "code"),
    [
        ({"amount_minor": 2000}, 422, "insufficient_funds"),
        ({"debit_account_id": "acct_nope"}, 404, "account_not_found"),
        ({"currency": "EUR"}, 422, "currency_mismatch"),
    ],
)
def test_batch_is_all_or_nothing(
    client: TestClient, database: Database, chart: dict[str, str], bad: dict[str, Any], status: int, code: str
) -> None:
    good = {
        "debit_account_id": chart["alice"],
        "credit_account_id": chart["bob"],
        "amount_minor": 100,
        "currency": "USD",
    }
    body = {"transfers": [good, good, {**good, **bad}, good]}
    before = ledger_counts(database)
    error = assert_error(post(client, "/v1/transfers/batch", body), status, code)
    assert error["param"].startswith("transfers[2].")
    assert ledger_counts(database) == before
    assert balance(client, chart["alice"]) == (1000, 0, 1000)
    assert balance(client, chart["bob"]) == (0, 0, 0)


def test_batch_limits(client: TestClient, chart: dict[str, str]) -> None:
    assert_error(post(client, "/v1/transfers/batch", {"transfers": []}), 400, "invalid_request")
    one = {"debit_account_id": chart["cash"], "credit_account_id": chart["bob"], "amount_minor": 1, "currency": "USD"}
    assert_error(post(client, "/v1/transfers/batch", {"transfers": [one] * 101}), 400, "invalid_request")
    assert balance(client, chart["bob"]) == (0, 0, 0)


# ---------------------------------------------------------------------------- statements


def test_entries_are_paginated(client: TestClient, chart: dict[str, str]) -> None:
    made = [moved(client, chart["cash"], chart["bob"], amount) for amount in (1, 2, 3, 4, 5)]
    expected = [next(e["id"] for e in t["entries"] if e["account_id"] == chart["bob"]) for t in made]
    seen: list[dict[str, Any]] = []
    pages = []
    cursor: str | None = None
    for _ in range(10):  # bounded: 5 entries in pages of 2 is 3 pages
        params: dict[str, Any] = {"limit": 2}
        if cursor is not None:
            params["starting_after"] = cursor
        response = client.get(f"/v1/accounts/{chart['bob']}/entries", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["data"]) <= 2
        seen.extend(page["data"])
        pages.append(page["has_more"])
        if not page["has_more"]:
            break
        cursor = page["data"][-1]["id"]
    assert pages == [True, True, False]
    assert [e["id"] for e in seen] == expected
    assert [e["amount_minor"] for e in seen] == [1, 2, 3, 4, 5]
    assert all(e["account_id"] == chart["bob"] and e["direction"] == "credit" for e in seen)
    assert all(type(e["amount_minor"]) is int for e in seen)


def test_entries_default_page_and_exact_fit(client: TestClient, chart: dict[str, str]) -> None:
    for amount in (1, 2):
        moved(client, chart["cash"], chart["bob"], amount)
    page = client.get(f"/v1/accounts/{chart['bob']}/entries", params={"limit": 2}).json()
    assert len(page["data"]) == 2 and page["has_more"] is False
    page = client.get(f"/v1/accounts/{chart['bob']}/entries").json()
    assert len(page["data"]) == 2 and page["has_more"] is False


@pytest.mark.parametrize("limit", [0, -1, 101, "ten"])
def test_entries_limit_out_of_range_is_400(client: TestClient, chart: dict[str, str], limit: int | str) -> None:
    response = client.get(f"/v1/accounts/{chart['bob']}/entries", params={"limit": limit})
    assert_error(response, 400, "invalid_request")


def test_entries_of_an_unknown_account_is_404(client: TestClient) -> None:
    assert_error(client.get("/v1/accounts/acct_nope/entries"), 404, "account_not_found")
