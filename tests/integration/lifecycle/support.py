"""What the tests of a bad item share: tenants with money to move, the worker's rounds, and
what a person sees of an item a round could not move (its page, the faults queue, /metrics)."""

from __future__ import annotations

import itertools
import time
from typing import Any

from fastapi.testclient import TestClient

from paycore.lifecycle.machine import Machine
from paycore.workers.jobs import WorkerContext
from tests.integration.ops.conftest import Console

TENANTS = ("acme", "bravo", "carol")  # acme is the console fixture's own tenant
_keys = itertools.count(1)


def tenants(console: Console) -> dict[str, str]:
    """Every tenant of TENANTS with its API key (acme exists already)."""
    keys = {"acme": console.api_key}
    for name in TENANTS[1:]:
        keys[name] = console.tenant(name)
    return keys


def context(console: Console) -> WorkerContext:
    return WorkerContext.create(console.env.database, console.env.settings, console.env.processor)


def later() -> None:
    """Test settings back a round off by 1-2 ms: a round after this finds the item due."""
    time.sleep(0.005)


def account(client: TestClient, key: str) -> str:
    response = client.post(
        "/v1/accounts",
        json={"code": f"merchant.{next(_keys)}", "currency": "USD", "normal_balance": "credit"},
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"acct-{next(_keys)}"},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def pay(client: TestClient, key: str, destination: str, amount_minor: int) -> dict[str, Any]:
    response = client.post(
        "/v1/payments",
        json={
            "amount_minor": amount_minor,
            "currency": "USD",
            "source": {"type": "card", "token": "tok_ok"},
            "destination_account": destination,
        },
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"pay-{next(_keys)}"},
    )
    assert response.status_code in (201, 202), response.text
    return dict(response.json())


def load(console: Console, machine: Machine[Any], tenant_id: str, item_id: str) -> Any:
    with console.env.database.read() as connection:
        return machine.load(connection, tenant_id, item_id)


def faults_metric(console: Console) -> dict[str, float]:
    """`paycore_worker_item_faults_total` by job, as /metrics reports it."""
    found = {}
    for line in console.env.client.get("/metrics").text.splitlines():
        if line.startswith("paycore_worker_item_faults_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('job="', 1)[1].split('"', 1)[0]] = float(value)
    return found


def notes(console: Console, key: str, object_id: str, note_type: str) -> list[dict[str, Any]]:
    """The object's audit events of `note_type`, as its tenant reads them."""
    response = console.env.client.get(
        "/v1/audit_events",
        params={"object_id": object_id, "type": note_type},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def console_shows(console: Console, kind: str, item_id: str, fault_code: str) -> None:
    """The faults queue lists the item with its fault; its page says a worker could not move it."""
    browser = console.signed_in("alice")
    queue = browser.get("/ops/faults")
    assert queue.status_code == 200, queue.text
    assert item_id in queue.text and fault_code in queue.text
    page = browser.get(f"/ops/{kind}s/{item_id}")
    assert page.status_code == 200, page.text
    assert f"A worker could not move this {kind}" in page.text and fault_code in page.text
    assert "fault" in page.text and "Retry now" in page.text
