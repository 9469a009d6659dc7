"""`GET /v1/audit_events` (issue 28 §2): the audit log readable by its tenant, refused requests
too, filtered by type, object, actor, outcome, idempotency key and time, in cursor pages."""

from __future__ import annotations

import functools
from typing import Any

from fastapi.testclient import TestClient

from paycore.db.engine import Database
from paycore.kit.clock import now_us, to_rfc3339
from paycore.tenants import service as tenants
from tests.integration.payouts.test_http_payouts import body, post
from tests.support.payouts import funded_source


def listed(client: TestClient, **params: Any) -> dict[str, Any]:
    response = client.get("/v1/audit_events", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_refused_payout_is_found_by_its_outcome_and_idempotency_key(client: TestClient, database: Database) -> None:
    source = funded_source(database, "default", 500)
    assert post(client, body(source), key="too-much-1").status_code == 422
    assert post(client, body(source, amount_minor=100), key="fine-1").status_code == 201
    refused = listed(client, outcome="refused")["data"]
    assert [(e["type"], e["outcome"], e["data"]["idempotency_key"]) for e in refused] == [
        ("api.payouts.schedule", "refused", "too-much-1")
    ]
    assert refused[0]["object"] == "audit_event" and refused[0]["actor"] == "local"
    by_key = listed(client, idempotency_key="too-much-1")["data"]
    assert [e["id"] for e in by_key] == [refused[0]["id"]]
    assert listed(client, idempotency_key="too_much%1")["data"] == []  # LIKE wildcards are literal
    accepted = listed(client, type="api.payouts.schedule", outcome="accepted")["data"]
    assert [e["data"]["idempotency_key"] for e in accepted] == ["fine-1"]


def test_filters_by_object_actor_and_time_and_pages_newest_first(client: TestClient, database: Database) -> None:
    source = funded_source(database, "default", 5_000)
    started = now_us()
    payout = post(client, body(source), key="p-1").json()
    mine = listed(client, object_id=payout["id"])["data"]
    assert {e["object_id"] for e in mine} == {payout["id"]} and mine
    assert [e["id"] for e in mine] == sorted((e["id"] for e in mine), reverse=True)  # newest first
    assert {e["actor"] for e in listed(client, actor="local", limit=100)["data"]} == {"local"}
    assert listed(client, actor="operator:nobody")["data"] == []
    later = listed(client, created_gte=to_rfc3339(started), limit=100)["data"]
    assert payout["id"] in {e["object_id"] for e in later}
    assert listed(client, created_lt=to_rfc3339(started - 10_000_000))["data"] == []
    first = listed(client, limit=1)
    assert first["has_more"] is True
    second = listed(client, limit=1, starting_after=first["data"][0]["id"])
    assert second["data"][0]["id"] < first["data"][0]["id"]
    bad = client.get("/v1/audit_events", params={"created_gte": "yesterday"})
    assert (bad.status_code, bad.json()["param"]) == (400, "created_gte")
    unknown = client.get("/v1/audit_events", params={"starting_after": "evt_01NOSUCH"})
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_starting_after")


def test_a_key_reads_its_own_tenants_audit_log_only(client: TestClient, database: Database) -> None:
    keys = {
        name: database.transaction(functools.partial(tenants.create_tenant, name=name, now_us=now_us())).api_key
        for name in ("acme", "globex")
    }
    acme = {"Authorization": f"Bearer {keys['acme']}"}
    globex = {"Authorization": f"Bearer {keys['globex']}"}
    put = client.put("/v1/settings", json={"refund_approval_threshold_minor": 1}, headers=acme)
    assert put.status_code == 200
    seen = client.get("/v1/audit_events", headers=acme).json()["data"]
    assert [e["type"] for e in seen] == ["settings.updated"] and seen[0]["actor"].startswith("api_key:key_")
    assert client.get("/v1/audit_events", headers=globex).json()["data"] == []
    assert client.get("/v1/audit_events").status_code == 401
    other = client.get("/v1/audit_events", headers=globex, params={"starting_after": seen[0]["id"]})
    assert other.status_code == 400  # another tenant's event is no cursor of this list
