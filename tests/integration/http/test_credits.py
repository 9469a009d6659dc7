"""SPEC §5 (contract): tenant credits over HTTP, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.db.engine import Database
from tests.support.rows import row_counts

PATH = "/v1/tenants/acme/credits"


def credit(key: str = "k1", *lines: dict[str, Any]) -> dict[str, Any]:
    return {"idempotency_key": key, "lines": list(lines) or [{"desc": "bonus", "amount_minor": 199, "currency": "USD"}]}


def balance(client: TestClient, tenant: str = "acme") -> int:
    response = client.get(f"/v1/tenants/{tenant}/balance")
    assert response.status_code == 200
    body = response.json()
    assert body["currency"] == "USD"
    assert type(body["amount_minor"]) is int
    return int(body["amount_minor"])


def test_a_credit_is_201_with_the_sum_of_its_lines(client: TestClient) -> None:
    lines = [
        {"desc": "a", "amount_minor": 100, "currency": "USD"},
        {"desc": "b", "amount_minor": 99, "currency": "USD"},
    ]
    response = client.post(PATH, json={"idempotency_key": "k1", "lines": lines})
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"id", "tenant_id", "idempotency_key", "currency", "amount_minor", "lines", "created_at"}
    assert body["tenant_id"] == "acme" and body["idempotency_key"] == "k1"
    assert body["amount_minor"] == 199 and type(body["amount_minor"]) is int
    assert body["currency"] == "USD" and body["lines"] == lines
    assert body["created_at"].endswith("Z")
    assert balance(client) == 199


def test_unknown_tenant_has_a_zero_balance(client: TestClient) -> None:
    assert balance(client, "nobody") == 0


def test_replay_is_200_with_the_same_body_and_adds_nothing(client: TestClient) -> None:
    first = client.post(PATH, json=credit())
    second = client.post(PATH, json=credit())
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert balance(client) == 199


def test_same_key_with_another_body_is_409_and_changes_nothing(client: TestClient, database: Database) -> None:
    client.post(PATH, json=credit())
    before = row_counts(database)
    response = client.post(PATH, json=credit("k1", {"desc": "other", "amount_minor": 5, "currency": "USD"}))
    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_key_reused"
    assert balance(client) == 199
    assert row_counts(database) == before


def test_two_tenants_may_use_one_key(client: TestClient) -> None:
    assert client.post("/v1/tenants/a/credits", json=credit()).status_code == 201
    assert client.post("/v1/tenants/b/credits", json=credit()).status_code == 201
    assert balance(client, "a") == 199 and balance(client, "b") == 199


BAD_AMOUNTS = [True, False, 1.0, 0.1, "199", None, 0, -1, 2**53]


@pytest.mark.parametrize("amount", BAD_AMOUNTS, ids=repr)
def test_bad_amounts_are_400_invalid_amount_and_change_nothing(
    client: TestClient, database: Database, amount: object
) -> None:
    before = row_counts(database)
    response = client.post(PATH, json=credit("k", {"desc": "x", "amount_minor": amount, "currency": "USD"}))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_amount"
    assert row_counts(database) == before
    # Refusals are not recorded: the same key still works with a good body.
    assert client.post(PATH, json=credit("k")).status_code == 201


def test_a_sum_past_2_53_is_refused(client: TestClient) -> None:
    big = {"desc": "x", "amount_minor": 2**53 - 1, "currency": "USD"}
    response = client.post(PATH, json=credit("k", big, {"desc": "y", "amount_minor": 1, "currency": "USD"}))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_amount"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]}, "invalid_idempotency_key"),
        (
            {"idempotency_key": "", "lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]},
            "invalid_idempotency_key",
        ),
        (
            {"idempotency_key": 7, "lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]},
            "invalid_idempotency_key",
        ),
        (
            {"idempotency_key": None, "lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]},
            "invalid_idempotency_key",
        ),
        ({"idempotency_key": "k"}, "invalid_request"),
        ({"idempotency_key": "k", "lines": []}, "invalid_request"),
        ({"idempotency_key": "k", "lines": {"desc": "x"}}, "invalid_request"),
        ({"idempotency_key": "k", "lines": ["x"]}, "invalid_request"),
        (
            {"idempotency_key": "k", "lines": [{"desc": "x", "amount_minor": 1, "currency": "EUR"}]},
            "unsupported_currency",
        ),
        (
            {"idempotency_key": "k", "lines": [{"desc": "x", "amount_minor": 1, "currency": 840}]},
            "unsupported_currency",
        ),
    ],
)
def test_refusals_are_400_with_their_code(client: TestClient, database: Database, body: Any, code: str) -> None:
    before = row_counts(database)
    response = client.post(PATH, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == code
    assert isinstance(response.json()["message"], str)
    assert row_counts(database) == before


def test_malformed_json_is_400_invalid_json(client: TestClient) -> None:
    response = client.post(PATH, content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"


def test_a_body_over_one_mebibyte_is_413(client: TestClient) -> None:
    response = client.post(PATH, content=b"x" * (1024 * 1024 + 1), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_unknown_route_is_json_404(client: TestClient) -> None:
    response = client.get("/v1/nope")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_a_balance_past_2_53_minus_1_is_a_clear_422_and_changes_nothing(client: TestClient, database: Database) -> None:
    """Issue 18: two credits of (2^53 - 1) / 2 + 1 took a balance to 9007199254740992. The
    second is refused (the ledger's limit), the success and replay shapes are unchanged, and
    the refusal is replayed under its key like any other recorded outcome."""
    half = (2**53 - 1) // 2 + 1
    line = {"desc": "big", "amount_minor": half, "currency": "USD"}
    first = client.post(PATH, json=credit("big-1", line))
    assert first.status_code == 201 and first.json()["amount_minor"] == half
    assert client.post(PATH, json=credit("big-1", line)).json() == first.json()
    before = row_counts(database)
    refused = client.post(PATH, json=credit("big-2", line))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "balance_limit_exceeded"
    assert "2^53 - 1" in refused.json()["message"]
    assert balance(client) == half
    again = client.post(PATH, json=credit("big-2", line))
    assert (again.status_code, again.json()) == (422, refused.json())
    assert {name: count for name, count in row_counts(database).items() if name != "idempotency_keys"} == {
        name: count for name, count in before.items() if name != "idempotency_keys"
    }


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("k" * 10_000, "idempotency_key is too long (10000 characters)"),
        ("", "idempotency_key is empty"),
        (7, "idempotency_key must be a string"),
        ("tab\there", "idempotency_key has a character that is not printable ASCII at position 4"),
    ],
    ids=["10000_chars", "empty", "number", "tab"],
)
def test_an_invalid_key_is_told_what_is_wrong(client: TestClient, database: Database, key: Any, says: str) -> None:
    """Issue 18: a 10,000-character key was told "must be a non-empty string"."""
    before = row_counts(database)
    response = client.post(PATH, json={**credit(), "idempotency_key": key})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "invalid_idempotency_key" and body["param"] == "idempotency_key"
    assert body["message"] == f"{says}: it must be 1-255 printable ASCII characters"
    assert len(response.text) < 300  # the key is never echoed back
    assert row_counts(database) == before


def test_a_missing_key_is_told_it_is_required(client: TestClient) -> None:
    response = client.post(PATH, json={"lines": credit()["lines"]})
    assert response.status_code == 400
    assert response.json()["message"] == "idempotency_key is required: it must be 1-255 printable ASCII characters"
