"""SPEC §3.1: idempotency keys on the ledger's money-moving POSTs, on both databases."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response
from sqlalchemy import select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.server import Server
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import InvalidIdempotencyKey
from paycore.idempotency.models import idempotency_keys
from paycore.kit.clock import now_us
from paycore.workers import jobs
from tests.support.rows import row_counts

US_PER_DAY = 86_400 * 1_000_000


# ---------------------------------------------------------------------------- helpers


def create_account(client: TestClient, code: str, *, normal_balance: str = "credit", tenant: str | None = None) -> str:
    headers = {"Paycore-Tenant": tenant} if tenant else None
    body = {
        "code": code,
        "currency": "USD",
        "normal_balance": normal_balance,
        "no_overdraft": normal_balance == "credit",
    }
    response = client.post("/v1/accounts", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def send(client: TestClient, path: str, body: Any, key: str, tenant: str | None = None) -> Response:
    headers = {"Idempotency-Key": key}
    if tenant is not None:
        headers["Paycore-Tenant"] = tenant
    if body is None:
        return client.post(path, headers=headers)
    return client.post(path, json=body, headers=headers)


def simple(debit: str, credit: str, amount_minor: int, **extra: Any) -> dict[str, Any]:
    return {
        "debit_account_id": debit,
        "credit_account_id": credit,
        "amount_minor": amount_minor,
        "currency": "USD",
    } | extra


def posted(client: TestClient, account_id: str, tenant: str | None = None) -> int:
    headers = {"Paycore-Tenant": tenant} if tenant else None
    response = client.get(f"/v1/accounts/{account_id}/balance", headers=headers)
    assert response.status_code == 200, response.text
    value = response.json()["posted_minor"]
    assert type(value) is int
    return int(value)


def assert_replay_of(first: Response, again: Response) -> None:
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == first.status_code
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"


@pytest.fixture
def chart(client: TestClient) -> dict[str, str]:
    cash = create_account(client, "cash", normal_balance="debit")
    alice = create_account(client, "alice")
    bob = create_account(client, "bob")
    assert send(client, "/v1/transfers", simple(cash, alice, 1000), "fund-alice").status_code == 201
    return {"cash": cash, "alice": alice, "bob": bob}


# ---------------------------------------------------------------------------- replay


def test_replay_returns_the_same_response_and_moves_money_once(
    client: TestClient, database: Database, chart: dict[str, str]
) -> None:
    body = simple(chart["alice"], chart["bob"], 100)
    first = send(client, "/v1/transfers", body, "t1")
    assert first.status_code == 201
    after_first = row_counts(database)
    for _ in range(3):
        assert_replay_of(first, send(client, "/v1/transfers", body, "t1"))
    assert row_counts(database) == after_first
    assert posted(client, chart["bob"]) == 100


def test_replay_ignores_json_key_order_and_spacing(client: TestClient, chart: dict[str, str]) -> None:
    body = simple(chart["alice"], chart["bob"], 100)
    first = send(client, "/v1/transfers", body, "t1")
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2)
    headers = {"Idempotency-Key": "t1", "content-type": "application/json"}
    again = client.post("/v1/transfers", content=reordered, headers=headers)
    assert_replay_of(first, again)
    assert posted(client, chart["bob"]) == 100


def test_every_money_moving_post_replays(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    hold = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 300, pending=True), "hold").json()
    plain = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 50), "plain").json()
    calls: list[tuple[str, Any]] = [
        (f"/v1/transfers/{hold['id']}/post", {"amount_minor": 200}),
        (f"/v1/transfers/{plain['id']}/reverse", None),
        ("/v1/transfers/batch", {"transfers": [simple(chart["alice"], chart["bob"], 1)] * 2}),
        ("/v1/accounts", {"code": "new", "currency": "USD", "normal_balance": "credit"}),
    ]
    for index, (path, body) in enumerate(calls):
        first = send(client, path, body, f"call-{index}")
        assert first.status_code in (200, 201), first.text
        counts = row_counts(database)
        assert_replay_of(first, send(client, path, body, f"call-{index}"))
        assert row_counts(database) == counts, path
    assert posted(client, chart["bob"]) == 200 + 50 - 50 + 2


def test_void_replays(client: TestClient, chart: dict[str, str]) -> None:
    hold = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 300, pending=True), "hold").json()
    first = send(client, f"/v1/transfers/{hold['id']}/void", None, "void")
    assert first.status_code == 200 and first.json()["status"] == "voided"
    assert_replay_of(first, send(client, f"/v1/transfers/{hold['id']}/void", None, "void"))
    # A new key is a new request: the hold is no longer pending.
    assert send(client, f"/v1/transfers/{hold['id']}/void", None, "void-2").status_code == 409


def test_same_key_with_another_body_is_409_and_changes_nothing(
    client: TestClient, database: Database, chart: dict[str, str]
) -> None:
    first = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 100), "t1")
    assert first.status_code == 201
    before = row_counts(database)
    for other in (
        simple(chart["alice"], chart["bob"], 101),
        simple(chart["bob"], chart["alice"], 100),
        simple(chart["alice"], chart["bob"], 100, metadata={"a": "b"}),
    ):
        response = send(client, "/v1/transfers", other, "t1")
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "idempotency_key_reused"
        assert "Idempotent-Replayed" not in response.headers
    assert row_counts(database) == before
    assert posted(client, chart["bob"]) == 100
    # The original request still replays.
    assert_replay_of(first, send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 100), "t1"))


def test_same_key_on_another_path_is_409(client: TestClient, database: Database, chart: dict[str, str]) -> None:
    hold_a = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 10, pending=True), "a").json()
    hold_b = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 10, pending=True), "b").json()
    assert send(client, f"/v1/transfers/{hold_a['id']}/void", None, "shared").status_code == 200
    before = row_counts(database)
    for path in (f"/v1/transfers/{hold_b['id']}/void", f"/v1/transfers/{hold_b['id']}/post"):
        response = send(client, path, None, "shared")
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "idempotency_key_reused"
    response = send(client, "/v1/accounts", {"code": "x", "currency": "USD", "normal_balance": "debit"}, "shared")
    assert response.status_code == 409 and response.json()["error"] == "idempotency_key_reused"
    assert row_counts(database) == before
    assert client.get(f"/v1/transfers/{hold_b['id']}").json()["status"] == "pending"


def test_keys_are_scoped_per_tenant(client: TestClient, database: Database) -> None:
    results = {}
    for tenant in ("acme", "globex"):
        cash = create_account(client, "cash", normal_balance="debit", tenant=tenant)
        shop = create_account(client, "shop", tenant=tenant)
        response = send(client, "/v1/transfers", simple(cash, shop, 70), "same-key", tenant=tenant)
        assert response.status_code == 201, response.text
        assert "Idempotent-Replayed" not in response.headers
        results[tenant] = (shop, response.json()["id"])
    assert results["acme"][1] != results["globex"][1]
    assert posted(client, results["acme"][0], "acme") == 70
    assert posted(client, results["globex"][0], "globex") == 70
    with database.read() as connection:
        query = select(idempotency_keys.c.tenant_id).where(idempotency_keys.c.key == "same-key")
        assert sorted(connection.execute(query).scalars()) == ["acme", "globex"]


# ---------------------------------------------------------------------------- what is recorded


def test_a_business_refusal_is_recorded_and_replayed(
    client: TestClient, database: Database, chart: dict[str, str]
) -> None:
    body = simple(chart["alice"], chart["bob"], 1500)
    first = send(client, "/v1/transfers", body, "too-much")
    assert first.status_code == 422 and first.json()["error"] == "insufficient_funds"
    # Even once alice could pay, the key answers what it answered the first time.
    assert send(client, "/v1/transfers", simple(chart["cash"], chart["alice"], 1000), "top-up").status_code == 201
    before = row_counts(database)
    assert_replay_of(first, send(client, "/v1/transfers", body, "too-much"))
    assert row_counts(database) == before
    assert posted(client, chart["bob"]) == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"amount_minor": 1.0},  # refused by the schema, before the handler
        {"amount_minor": 0},
        {"expires_at": "2000-01-01T00:00:00Z", "pending": True},  # refused inside the transaction
    ],
)
def test_a_validation_error_is_not_recorded(
    client: TestClient, database: Database, chart: dict[str, str], bad: dict[str, Any]
) -> None:
    before = row_counts(database)
    response = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 100) | bad, "retry-me")
    assert response.status_code == 400, response.text
    assert row_counts(database) == before
    good = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 100), "retry-me")
    assert good.status_code == 201, good.text
    assert "Idempotent-Replayed" not in good.headers
    assert posted(client, chart["bob"]) == 100


def test_a_missing_account_is_not_recorded(client: TestClient, chart: dict[str, str]) -> None:
    """404: nothing committed, so the key stays free for the corrected request."""
    response = send(client, "/v1/transfers", simple(chart["alice"], "acct_nope", 100), "k")
    assert response.status_code == 404
    assert send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 100), "k").status_code == 201


@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "a\tb", "caf\u00e9", "del\x7f"],
    ids=["empty", "256_chars", "tab", "non_ascii", "del"],
)
def test_invalid_keys_are_400(client: TestClient, database: Database, chart: dict[str, str], key: str) -> None:
    before = row_counts(database)
    headers = {b"Idempotency-Key": key.encode("latin-1")}  # raw bytes, as a careless client sends them
    response = client.post("/v1/transfers", json=simple(chart["alice"], chart["bob"], 1), headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_idempotency_key"
    assert row_counts(database) == before


@pytest.mark.parametrize("key", ["x" * 255, "a", " spaced key ", "~!@#$%^&*()"])
def test_valid_keys_at_the_edges_are_accepted(client: TestClient, chart: dict[str, str], key: str) -> None:
    body = simple(chart["alice"], chart["bob"], 1)
    first = send(client, "/v1/transfers", body, key)
    assert first.status_code == 201, first.text
    assert_replay_of(first, send(client, "/v1/transfers", body, key))


@pytest.mark.parametrize("key", ["", "x" * 256, "a\tb", "caf\u00e9", 7, None], ids=repr)
def test_the_service_check_refuses_the_same_keys(key: object) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        idempotency.check_key(key)


# ---------------------------------------------------------------------------- concurrency


@contextmanager
def serving(settings: Settings, database: Database) -> Iterator[tuple[str, int]]:
    server = Server(create_app(settings, database), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def post_all_at_once(address: tuple[str, int], requests: list[tuple[str, str, bytes]]) -> list[tuple[int, bytes, bool]]:
    """POST every (path, key, body) from its own thread, released together; (status, body, replayed)."""
    barrier = threading.Barrier(len(requests))
    results: list[tuple[int, bytes, bool] | None] = [None] * len(requests)

    def one(index: int, path: str, key: str, body: bytes) -> None:
        connection = http.client.HTTPConnection(*address, timeout=30)
        try:
            barrier.wait(timeout=30)
            headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            replayed = response.getheader("Idempotent-Replayed") == "true"
            results[index] = (response.status, response.read(), replayed)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i, *request)) for i, request in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(result is not None for result in results), results
    return [result for result in results if result is not None]


def test_concurrent_requests_with_one_key_execute_once(
    settings: Settings, database: Database, client: TestClient, chart: dict[str, str]
) -> None:
    body = json.dumps(simple(chart["alice"], chart["bob"], 100)).encode()
    before = row_counts(database)
    with serving(settings, database) as address:
        results = post_all_at_once(address, [("/v1/transfers", "race", body)] * 20)
    assert [status for status, _, _ in results] == [201] * 20, results
    assert len({content for _, content, _ in results}) == 1
    assert sum(1 for _, _, replayed in results if not replayed) == 1
    after = row_counts(database)
    assert after["ledger_transfers"] == before["ledger_transfers"] + 1
    assert after["ledger_entries"] == before["ledger_entries"] + 2
    assert after["idempotency_keys"] == before["idempotency_keys"] + 1
    assert posted(client, chart["bob"]) == 100
    assert posted(client, chart["alice"]) == 900


def test_concurrent_spends_never_overdraw(
    settings: Settings, database: Database, client: TestClient, chart: dict[str, str]
) -> None:
    """SPEC §4: 20 different transfers of 100 race for alice's 1000; exactly 10 may win."""
    body = json.dumps(simple(chart["alice"], chart["bob"], 100)).encode()
    with serving(settings, database) as address:
        results = post_all_at_once(address, [("/v1/transfers", f"spend-{i}", body) for i in range(20)])
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [201] * 10 + [422] * 10, results
    assert all(json.loads(content)["error"] == "insufficient_funds" for status, content, _ in results if status == 422)
    assert posted(client, chart["alice"]) == 0
    assert posted(client, chart["bob"]) == 1000


def test_concurrent_posts_and_voids_resolve_a_hold_once(
    settings: Settings, database: Database, client: TestClient, chart: dict[str, str]
) -> None:
    """SPEC §4: a hold is posted or voided exactly once, also when 20 requests race for it."""
    hold = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 300, pending=True), "hold").json()
    before = row_counts(database)
    requests = [(f"/v1/transfers/{hold['id']}/{'post' if i % 2 else 'void'}", f"resolve-{i}", b"") for i in range(20)]
    with serving(settings, database) as address:
        results = post_all_at_once(address, requests)
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] + [409] * 19, results
    assert all(
        json.loads(content)["error"] == "transfer_not_pending" for status, content, _ in results if status == 409
    )
    after = row_counts(database)
    assert after["ledger_transfers"] == before["ledger_transfers"] + 1  # one resolution
    final = client.get(f"/v1/transfers/{hold['id']}").json()["status"]
    assert final in ("posted", "voided")
    assert posted(client, chart["bob"]) == (300 if final == "posted" else 0)
    assert posted(client, chart["alice"]) == (700 if final == "posted" else 1000)


def test_concurrent_reversals_reverse_once(
    settings: Settings, database: Database, client: TestClient, chart: dict[str, str]
) -> None:
    original = send(client, "/v1/transfers", simple(chart["alice"], chart["bob"], 300), "original").json()
    requests = [(f"/v1/transfers/{original['id']}/reverse", f"reverse-{i}", b"") for i in range(20)]
    with serving(settings, database) as address:
        results = post_all_at_once(address, requests)
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [201] + [409] * 19, results
    assert posted(client, chart["bob"]) == 0
    assert posted(client, chart["alice"]) == 1000


# ---------------------------------------------------------------------------- retention


def key_rows(database: Database) -> dict[str, tuple[int, int | None]]:
    with database.read() as connection:
        query = select(idempotency_keys.c.key, idempotency_keys.c.created_at_us, idempotency_keys.c.expires_at_us)
        return {row.key: (row.created_at_us, row.expires_at_us) for row in connection.execute(query)}


def test_account_keys_expire_and_money_keys_are_kept_forever(settings: Settings, database: Database) -> None:
    short = replace(settings, idempotency_retention_days=7)
    with TestClient(create_app(short, database)) as client:
        account_body = {"code": "cash", "currency": "USD", "normal_balance": "debit"}
        cash = send(client, "/v1/accounts", account_body, "acct-key").json()["id"]
        shop = send(client, "/v1/accounts", {**account_body, "code": "shop"}, "acct-key-2").json()["id"]
        assert send(client, "/v1/transfers", simple(cash, shop, 5), "money-key").status_code == 201
        credit = {"idempotency_key": "credit-key", "lines": [{"desc": "x", "amount_minor": 3, "currency": "USD"}]}
        assert client.post("/v1/tenants/default/credits", json=credit).status_code == 201

        rows = key_rows(database)
        for key in ("acct-key", "acct-key-2"):
            created_at_us, expires_at_us = rows[key]
            assert expires_at_us == created_at_us + 7 * US_PER_DAY
        assert rows["money-key"][1] is None and rows["credit-key"][1] is None

        # Before expiry nothing goes; after it, the account keys go, in bounded rounds.
        not_yet = rows["acct-key"][0] + 7 * US_PER_DAY - 1
        assert database.transaction(lambda c: idempotency.prune(c, now_us=not_yet, limit=100)) == 0
        far_future = now_us() + 10_000 * US_PER_DAY
        assert database.transaction(lambda c: idempotency.prune(c, now_us=far_future, limit=1)) == 1
        assert database.transaction(lambda c: idempotency.prune(c, now_us=far_future, limit=100)) == 1
        assert database.transaction(lambda c: idempotency.prune(c, now_us=far_future, limit=100)) == 0
        assert set(key_rows(database)) == {"money-key", "credit-key"}

        # A pruned key is free again: the same request now meets the account that exists.
        again = send(client, "/v1/accounts", account_body, "acct-key")
        assert again.status_code == 409 and again.json()["error"] == "account_exists"
        # The kept key still replays.
        replay = send(client, "/v1/transfers", simple(cash, shop, 5), "money-key")
        assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"


def test_the_worker_job_prunes_only_expired_keys(client: TestClient, database: Database) -> None:
    body = {"code": "cash", "currency": "USD", "normal_balance": "debit"}
    assert send(client, "/v1/accounts", body, "fresh").status_code == 201
    assert jobs.prune_idempotency_keys(database, 100) == 0  # 30 days have not passed
    assert set(key_rows(database)) == {"fresh"}


def test_default_retention_is_at_least_30_days(client: TestClient, database: Database) -> None:
    body = {"code": "cash", "currency": "USD", "normal_balance": "debit"}
    assert send(client, "/v1/accounts", body, "k").status_code == 201
    created_at_us, expires_at_us = key_rows(database)["k"]
    assert expires_at_us is not None and expires_at_us - created_at_us >= 30 * US_PER_DAY


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("x" * 10_000, "Idempotency-Key is too long (10000 characters)"),
        ("x" * 256, "Idempotency-Key is too long (256 characters)"),
        ("a\tb", "Idempotency-Key has a character that is not printable ASCII at position 2"),
        ("caf\u00e9", "Idempotency-Key has a character that is not printable ASCII at position 4"),
    ],
    ids=["10000_chars", "256_chars", "tab", "non_ascii"],
)
def test_an_invalid_key_is_told_what_is_wrong(client: TestClient, chart: dict[str, str], key: str, says: str) -> None:
    """Issue 18: a 10,000-character key was told "must be a non-empty string"."""
    headers = {b"Idempotency-Key": key.encode("latin-1")}
    response = client.post("/v1/transfers", json=simple(chart["alice"], chart["bob"], 1), headers=headers)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "invalid_idempotency_key" and body["param"] == "Idempotency-Key"
    assert body["message"] == f"{says}: it must be 1-255 printable ASCII characters"
    assert len(response.text) < 300  # the key is never echoed back
