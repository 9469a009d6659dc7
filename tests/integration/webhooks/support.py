"""What the webhook tests share: an app on the database under test, a receiver playing the
tenant's server, events made by real state changes (payouts scheduled and canceled), and a
worker's delivery round run on demand."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.kit.clock import now_us
from paycore.payouts import service as payouts
from paycore.webhooks import rounds as webhook_rounds
from paycore.workers.jobs import webhook_config
from tests.support import payouts as payout_support
from tests.support.receiver import Receiver

TENANT = "default"
_keys = itertools.count(1)


@dataclass
class Env:
    client: TestClient
    database: Database
    settings: Settings
    receiver: Receiver
    config: webhook_rounds.Config

    def endpoint(self, url: str | None = None, events: list[str] | None = None, tenant: str = TENANT) -> dict[str, Any]:
        response = self.client.post(
            "/v1/webhook_endpoints",
            json={"url": url or self.receiver.url, "events": events or ["*"]},
            headers={"Idempotency-Key": f"we-{next(_keys)}", "Paycore-Tenant": tenant},
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def payout(self, tenant: str = TENANT, amount_minor: int = 1_000) -> str:
        """A payout scheduled: one `payout.scheduled` event."""
        source = payout_support.funded_source(self.database, tenant, amount_minor)
        return payout_support.schedule(self.database, tenant, source, amount_minor).id

    def cancel(self, payout_id: str, tenant: str = TENANT) -> None:
        self.database.transaction(lambda c: payouts.cancel(c, tenant, payout_id, actor="local", now_us=now_us()))

    def deliver(self, rounds: int = 1, endpoints_max: int = 4) -> int:
        made = 0
        for _ in range(rounds):
            time.sleep(0.005)  # backoff is 1-2 ms in these tests: a round is "time has passed"
            made += webhook_rounds.deliver_due(self.database, self.config, "test-worker", endpoints_max=endpoints_max)
        return made

    def get(self, path: str, tenant: str = TENANT, **params: Any) -> Any:
        return self.client.get(path, params=params, headers={"Paycore-Tenant": tenant})

    def events(self, **params: Any) -> list[dict[str, Any]]:
        response = self.get("/v1/events", limit=100, **params)
        assert response.status_code == 200, response.text
        return list(response.json()["data"])

    def deliveries(self, event_id: str, tenant: str = TENANT) -> list[dict[str, Any]]:
        response = self.get(f"/v1/events/{event_id}/deliveries", tenant)
        assert response.status_code == 200, response.text
        return list(response.json()["data"])


@pytest.fixture
def env(settings: Settings, database: Database) -> Iterator[Env]:
    settings = replace(
        settings,
        webhook_timeout_ms=1_000,
        webhook_lease_ms=10_000,
        webhook_backoff_ms=1,
        webhook_backoff_max_ms=2,
    )
    with Receiver() as receiver, TestClient(create_app(settings, database)) as client:
        yield Env(
            client,
            database,
            settings,
            receiver,
            webhook_config(settings, cast(FastAPI, client.app).state.keyring.get()),
        )
