"""`paycore_work_claimed_oldest_age_seconds{kind}` (issue 18): a worker killed with kill -9 in
the middle of sending left payouts `processing` with no sign. The gauge is the age of the
oldest item in its working state, so it climbs while nobody finishes that work."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.payouts import states
from tests.support import payouts as payout_support

NAME = "paycore_work_claimed_oldest_age_seconds"


def ages(client: TestClient) -> dict[str, int]:
    body = client.get("/metrics").text
    found = dict(re.findall(rf'^{NAME}{{kind="(\w+)"}} (\d+)\.0$', body, re.MULTILINE))
    return {kind: int(value) for kind, value in found.items()}


def test_nothing_in_flight_is_zero_for_every_kind(client: TestClient) -> None:
    assert ages(client) == {"payment": 0, "refund": 0, "payout": 0}


def test_a_payout_left_processing_by_a_dead_worker_shows_its_age(client: TestClient, database: Database) -> None:
    source = payout_support.funded_source(database, "acme", 10_000)
    payout = payout_support.schedule(database, "acme", source, 2_500)
    payout = payout_support.move(database, payout, *payout_support.PATH_TO[states.PROCESSING])
    # The worker that claimed it died ten minutes ago, holding it (its lease lapses later).
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE payouts SET updated_at_us = :at WHERE tenant_id = 'acme' AND id = :id"),
            {"at": now_us() - 600_000_000, "id": payout.id},
        )
    found = ages(client)
    assert 600 <= found["payout"] < 660
    assert found["payment"] == 0 and found["refund"] == 0
    # Once the payout leaves its working state, the gauge falls back to 0.
    payout_support.move(database, payout, states.SENT)
    assert ages(client)["payout"] == 0
