"""SPEC §11: `GET /v1/reports/losses` through the app, on SQLite and PostgreSQL: the caller's
tenant only, JSON integers, cursor pages, totals over every page, and a clear 400 for bad input."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.reports import expected
from tests.integration.reports.expected import with_ids

PATH = "/v1/reports/losses"


def get(client: TestClient, tenant: str = "acme", **params: Any) -> Any:
    response = client.get(PATH, params=params, headers={"Paycore-Tenant": tenant})
    body = response.json()
    if response.status_code == 200:
        for row in body["data"]:
            assert row.pop("object") == "payout_loss"
            assert all(type(value) is int for key, value in row.items() if key.endswith("_minor")), row
    return response.status_code, body


def test_the_report_of_all_time(client: TestClient, ids: dict[str, str]) -> None:
    status, body = get(client)
    assert status == 200
    assert body == {
        "object": "list",
        "data": with_ids(expected.ALL_TIME, ids),
        "has_more": False,
        "totals": expected.ALL_TIME_TOTALS,
        "dispute_totals": [],  # the fixture has no dispute (tests/integration/reports/test_dispute_losses.py)
        "from": None,
        "to": None,
    }


def test_a_month_and_the_filters(client: TestClient, ids: dict[str, str]) -> None:
    status, body = get(client, **{"from": "2026-01-01", "to": "2026-01-31"})
    assert status == 200
    assert body["data"] == with_ids(expected.JANUARY, ids)
    assert body["totals"] == expected.JANUARY_TOTALS
    assert (body["from"], body["to"]) == ("2026-01-01", "2026-01-31")
    _, february = get(client, **{"from": "2026-02-01", "to": "2026-02-28"})
    assert february["data"] == with_ids(expected.FEBRUARY, ids)
    _, sepa = get(client, rail="sepa")
    assert [row["payout_id"] for row in sepa["data"]] == [ids["sepa_short"], ids["sepa_refund"]]
    _, usd = get(client, currency="USD")
    assert usd["totals"] == [{"currency": "USD", "loss_minor": 5_300, "payouts": 4}]


def test_pages_by_cursor(client: TestClient, ids: dict[str, str]) -> None:
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 2}
    for _ in range(len(expected.ALL_TIME)):
        status, body = get(client, **params)
        assert status == 200 and len(body["data"]) <= 2
        assert body["totals"] == expected.ALL_TIME_TOTALS  # the whole set's, on every page
        seen += body["data"]
        if not body["has_more"]:
            break
        params["starting_after"] = body["data"][-1]["payout_id"]
    assert seen == with_ids(expected.ALL_TIME, ids)


def test_each_tenant_sees_its_own(client: TestClient, ids: dict[str, str]) -> None:
    status, body = get(client, tenant="globex")
    assert status == 200
    assert body["data"] == with_ids(expected.GLOBEX, ids)
    assert get(client, tenant="initech")[1] | {"data": None} == {
        "object": "list",
        "data": None,
        "has_more": False,
        "totals": [],
        "dispute_totals": [],
        "from": None,
        "to": None,
    }
    status, refused = get(client, starting_after=ids["globex"])  # acme may not page from globex's payout
    assert (status, refused["error"], refused["param"]) == (400, "invalid_starting_after", "starting_after")


@pytest.mark.parametrize(
    ("params", "code", "param"),
    [
        ({"from": "2026-13-01"}, "invalid_date", "from"),
        ({"from": "yesterday"}, "invalid_date", "from"),
        ({"to": "2026-01-01T00:00:00Z"}, "invalid_date", "to"),
        ({"to": "2026-02-29"}, "invalid_date", "to"),
        ({"from": "2026-02-01", "to": "2026-01-01"}, "invalid_date_range", "from"),
        ({"rail": "swift"}, "invalid_request", "rail"),
        ({"currency": "XYZ"}, "unsupported_currency", "currency"),
        ({"currency": "usd"}, "unsupported_currency", "currency"),
        ({"limit": 0}, "invalid_request", "limit"),
        ({"limit": 101}, "invalid_request", "limit"),
        ({"limit": "ten"}, "invalid_request", "limit"),
        ({"starting_after": "po_NOSUCHPAYOUT"}, "invalid_starting_after", "starting_after"),
        ({"starting_after": "po_1;DROP"}, "invalid_starting_after", "starting_after"),
        ({"starting_after": "x" * 65}, "invalid_starting_after", "starting_after"),
        ({"rail": "ach' OR '1'='1"}, "invalid_request", "rail"),
    ],
)
def test_bad_input_is_a_400_with_its_code(
    client: TestClient, ids: dict[str, str], params: dict[str, Any], code: str, param: str
) -> None:
    assert ids
    status, body = get(client, **params)
    assert (status, body["error"], body.get("param")) == (400, code, param), body


@pytest.mark.parametrize("params", [{"starting_after": "po_\x00"}, {"rail": "ach\x00"}, {"from": "2026-01-01\x00"}])
def test_nul_characters_never_reach_the_database(client: TestClient, params: dict[str, Any]) -> None:
    status, body = get(client, **params)
    assert status == 400 and isinstance(body["error"], str), body
