"""Outgoing webhooks (issue 21, ADR 0015) through real `paycore worker` processes on PostgreSQL.

The delivery guarantees are about processes, so an in-process round cannot show them:
1. a worker killed with SIGKILL in the middle of a POST leaves its endpoint lease to lapse and
   the delivery pending; the next worker sends the same delivery (same Paycore-Delivery-Id)
   and it is delivered: at least once, never lost;
2. two worker processes (two delivery threads each) on one database never POST one delivery at
   the same moment (endpoint leases taken with FOR UPDATE SKIP LOCKED): the receiver's request
   intervals per delivery id never overlap, and with nothing failing each is received once;
3. one tenant's dead endpoint with a backlog of 2,000 events does not delay another tenant's
   events (endpoints, not events, are the unit a worker takes, least recently served first),
   and the dead endpoint is tried once per its own backoff, not once per pending event.

Events come from real state changes: payouts scheduled through the service (one
`payout.scheduled` event each), for tomorrow so that no worker queues them (which would publish
more events). The workers' processor is a port nobody listens on: only webhooks matter here.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import signal
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, select

from paycore.db.engine import Database
from paycore.kit.clock import now_us, parse_rfc3339
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.webhooks.models import webhook_attempts, webhook_deliveries, webhook_endpoints
from paycore.webhooks.verify import verify_event
from tests.e2e.payments_support import CliProcess, clean_env, wait_for
from tests.e2e.support import SERVER_POOL_SIZE, free_port
from tests.e2e.test_payments_worker_crash import start_worker
from tests.e2e.test_payout_worker_crash import workers
from tests.support.payouts import ACH, funded_source
from tests.support.receiver import Received, Receiver

__all__ = ["workers"]  # the fixture: worker processes stopped, and their logs printed, at the end

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

AMOUNT_MINOR = 100
WAIT_S = 30
_keys = itertools.count(1)


def worker_env(database_url: str, **webhook: str) -> dict[str, str]:
    return clean_env(
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_DB_POOL_SIZE=str(SERVER_POOL_SIZE),
        PAYCORE_PROCESSOR_URL=f"http://127.0.0.1:{free_port()}",  # nobody: no payout work is due anyway
        **webhook,
    )


def wait_started(worker: CliProcess) -> None:
    """Until the worker logged its start (its delivery threads start right after)."""
    wait_for("the worker starts", lambda: True if "worker_started" in worker.log() else None, WAIT_S, worker.log)


def create_endpoint(client: TestClient, tenant: str, url: str) -> dict[str, Any]:
    """POST /v1/webhook_endpoints (local mode: the Paycore-Tenant header names the tenant)."""
    headers = {"Idempotency-Key": f"we-{next(_keys)}", "Paycore-Tenant": tenant}
    response = client.post("/v1/webhook_endpoints", json={"url": url, "events": ["*"]}, headers=headers)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _tomorrow() -> str:
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat()


def schedule_payouts(database: Database, tenant: str, source_id: str, count: int) -> None:
    """`count` payouts scheduled in one transaction: `count` events, published at its commit."""
    new = NewPayout(AMOUNT_MINOR, "USD", source_id, "ach", ACH, execute_on=_tomorrow())

    def work(connection: Connection) -> None:
        now = now_us()
        for _ in range(count):
            payouts.schedule(connection, tenant, new, actor="local", now_us=now)

    database.transaction(work)


def make_events(database: Database, tenant: str, count: int) -> None:
    schedule_payouts(database, tenant, funded_source(database, tenant, count * AMOUNT_MINOR), count)


def deliveries(database: Database, tenant: str) -> list[dict[str, Any]]:
    query = select(webhook_deliveries).where(webhook_deliveries.c.tenant_id == tenant)
    with database.read() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def endpoint_row(database: Database, tenant: str, endpoint_id: str) -> dict[str, Any]:
    query = select(webhook_endpoints).where(
        webhook_endpoints.c.tenant_id == tenant, webhook_endpoints.c.id == endpoint_id
    )
    with database.read() as connection:
        return dict(connection.execute(query).mappings().one())


def attempt_workers(database: Database) -> list[str]:
    with database.read() as connection:
        return [str(worker) for worker in connection.execute(select(webhook_attempts.c.worker)).scalars()]


def all_delivered(database: Database, tenant: str, count: int) -> bool | None:
    found = deliveries(database, tenant)
    return True if len(found) == count and all(row["status"] == "delivered" for row in found) else None


# ---------------------------------------------------------------------------- 1. kill -9

HANG_S = 8.0  # the receiver holds the first POST longer than the worker waits for it
KILLED_TIMEOUT_MS = 3_000
# The lease must have room for one call's whole exchange (Settings refuses less than twice the
# timeout plus 1 s): the shortest such lease, so that the second worker's wait stays short.
KILLED_LEASE_MS = 2 * KILLED_TIMEOUT_MS + 1_500
LEASE_SLACK_S = 1.0  # the claim precedes the POST's arrival by milliseconds; generous


def test_a_worker_killed_mid_delivery_leaves_it_to_the_next_worker_under_the_same_delivery_id(
    tmp_path: Path, database_url: str, database: Database, client: TestClient, workers: list[CliProcess]
) -> None:
    tenant = "default"
    env = worker_env(
        database_url,
        PAYCORE_WEBHOOK_TIMEOUT_MS=str(KILLED_TIMEOUT_MS),
        PAYCORE_WEBHOOK_LEASE_MS=str(KILLED_LEASE_MS),
        PAYCORE_WEBHOOK_POLL_MS="100",
        PAYCORE_WEBHOOK_CONCURRENCY_MAX="1",
    )
    with Receiver() as receiver:
        receiver.hang_s = HANG_S
        receiver.answer("timeout")
        endpoint = create_endpoint(client, tenant, receiver.url)
        make_events(database, tenant, 1)
        [queued] = deliveries(database, tenant)

        first = start_worker(workers, tmp_path, env)
        [interrupted] = wait_for("the first POST arrives", lambda: receiver.received or None, WAIT_S, first.log)
        holder = endpoint_row(database, tenant, endpoint["id"])["claimed_by"]
        assert holder is not None and f":{first.pid}:" in holder, (holder, first.pid)
        assert first.kill9() == -signal.SIGKILL
        assert deliveries(database, tenant) == [queued]  # the killed worker recorded nothing

        second = start_worker(workers, tmp_path, env)
        [delivered] = receiver.wait_for(1, WAIT_S)
        wait_for("the delivery is recorded", lambda: all_delivered(database, tenant, 1), WAIT_S, second.log)
        second.stop()

    assert [got.mode for got in receiver.received] == ["timeout", "ok"]
    for got in (interrupted, delivered):
        assert got.headers["paycore-delivery-id"] == queued["id"]
        assert got.headers["paycore-event-id"] == queued["event_id"]
    assert interrupted.body == delivered.body  # the same event, byte for byte
    # The second worker waited for the killed worker's lease to lapse: never two at once.
    assert delivered.started_s - interrupted.started_s >= KILLED_LEASE_MS / 1000 - LEASE_SLACK_S
    answer = client.get(f"/v1/events/{queued['event_id']}/deliveries", headers={"Paycore-Tenant": tenant})
    [listed] = answer.json()["data"]
    assert (listed["id"], listed["status"], listed["attempts_made"]) == (queued["id"], "delivered", 1)
    assert [(a["attempt"], a["outcome"], a["status_code"]) for a in listed["attempts"]] == [(1, "delivered", 200)]
    [by] = attempt_workers(database)
    assert f":{second.pid}:" in by, (by, second.pid)
    row = endpoint_row(database, tenant, endpoint["id"])
    assert (row["claimed_by"], row["failures"]) == (None, 0)


def test_a_worker_stopped_mid_delivery_records_it_and_lets_go_of_the_endpoint(
    tmp_path: Path, database_url: str, database: Database, client: TestClient, workers: list[CliProcess]
) -> None:
    """SIGTERM (a deploy) is not SIGKILL: the worker finishes the POST in flight, records it
    and releases its endpoint before it exits, so the tenant gets no duplicate and the
    endpoint's other events wait out no lease."""
    tenant = "default"
    env = worker_env(
        database_url,
        PAYCORE_WEBHOOK_TIMEOUT_MS=str(KILLED_TIMEOUT_MS),
        PAYCORE_WEBHOOK_LEASE_MS="60000",
        PAYCORE_WEBHOOK_POLL_MS="100",
        PAYCORE_WEBHOOK_CONCURRENCY_MAX="1",
    )
    with Receiver() as receiver:
        receiver.slow_s = 1.5
        receiver.answer("slow_ok")
        endpoint = create_endpoint(client, tenant, receiver.url)
        make_events(database, tenant, 1)
        worker = start_worker(workers, tmp_path, env)
        wait_for("the POST arrives", lambda: receiver.received or None, WAIT_S, worker.log)
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(KILLED_TIMEOUT_MS * 2 / 1000 + 5) == 0, worker.log()

    assert all_delivered(database, tenant, 1), deliveries(database, tenant)
    assert len(receiver.received) == 1
    row = endpoint_row(database, tenant, endpoint["id"])
    assert (row["claimed_by"], row["claimed_until_us"]) == (None, None)


# ---------------------------------------------------------------------------- 2. two workers

TENANTS = ("t-one", "t-two", "t-three", "t-four")
EVENTS_PER_TENANT = 50
SLOW_S = 0.02
BATCH_MAX = 5  # small turns: endpoints change hands between threads and processes often


def assert_never_overlapping(received: list[Received]) -> None:
    """Per delivery id, each request was answered before the next one of that id arrived."""
    by_delivery: dict[str, list[Received]] = {}
    for got in received:
        by_delivery.setdefault(got.headers["paycore-delivery-id"], []).append(got)
    for delivery_id, requests in by_delivery.items():
        requests.sort(key=lambda got: got.started_s)
        for earlier, later in itertools.pairwise(requests):
            assert earlier.finished_s is not None and earlier.finished_s <= later.started_s, (delivery_id, requests)


def test_two_worker_processes_never_post_one_delivery_at_the_same_moment(
    tmp_path: Path, database_url: str, database: Database, client: TestClient, workers: list[CliProcess]
) -> None:
    env = worker_env(
        database_url,
        PAYCORE_WEBHOOK_CONCURRENCY_MAX="2",
        PAYCORE_WEBHOOK_POLL_MS="50",
        PAYCORE_WEBHOOK_BATCH_MAX=str(BATCH_MAX),
    )
    with ExitStack() as stack:
        receivers = {tenant: stack.enter_context(Receiver()) for tenant in TENANTS}
        secrets = {}
        for tenant, receiver in receivers.items():
            receiver.default, receiver.slow_s = "slow_ok", SLOW_S
            secrets[tenant] = create_endpoint(client, tenant, receiver.url)["secret"]
        sources = {tenant: funded_source(database, tenant, EVENTS_PER_TENANT * AMOUNT_MINOR) for tenant in TENANTS}
        pair = [start_worker(workers, tmp_path, env) for _ in range(2)]
        for worker in pair:
            wait_started(worker)
        for tenant in TENANTS:  # both processes are polling when the events arrive
            schedule_payouts(database, tenant, sources[tenant], EVENTS_PER_TENANT)
        for tenant in TENANTS:
            wait_for(
                f"{tenant}'s deliveries are all delivered",
                functools.partial(all_delivered, database, tenant, EVENTS_PER_TENANT),
                WAIT_S,
                lambda: "\n".join(worker.log() for worker in pair),
            )
        for worker in pair:
            worker.stop()

    for tenant, receiver in receivers.items():
        assert_each_delivered_once(database, tenant, receiver, secrets[tenant])
    by_process = {worker.pid: 0 for worker in pair}
    for holder in attempt_workers(database):
        by_process[next(pid for pid in by_process if f":{pid}:" in holder)] += 1
    assert sum(by_process.values()) == len(TENANTS) * EVENTS_PER_TENANT
    assert all(by_process.values()), by_process  # both processes delivered
    print(f"attempts by worker process: {by_process}")


def assert_each_delivered_once(database: Database, tenant: str, receiver: Receiver, secret: str) -> None:
    """Every event of the tenant reached its endpoint, signed, under its delivery's id, once."""
    expected = {row["id"]: row["event_id"] for row in deliveries(database, tenant)}
    assert len(set(expected.values())) == EVENTS_PER_TENANT  # one delivery per event: one endpoint
    assert_never_overlapping(receiver.received)
    got = [(r.headers["paycore-delivery-id"], r.headers["paycore-event-id"]) for r in receiver.received]
    assert sorted(got) == sorted(expected.items())  # each delivery exactly once: nothing failed
    assert all(r.mode == "slow_ok" and r.finished_s is not None for r in receiver.received)
    for found in receiver.received:
        event = verify_event(found.body, found.headers["paycore-signature"], secret)
        assert event["type"] == "payout.scheduled" and event["data"]["status"] == "scheduled"


# ---------------------------------------------------------------------------- 3. fairness

DEAD_BACKLOG = 2_000
DEAD_TIMEOUT_MS = 500  # each try of the dead endpoint holds a delivery thread this long
DEAD_BACKOFF_MS = 1_000  # the endpoint's own backoff: at least half of it after each failure
HEALTHY_EVENTS = 30
HEALTHY_SPACING_S = 0.1
# The bound on a healthy tenant's latency (its state change to the receiver's arrival) while
# another tenant's dead endpoint has 2,000 events pending. Expected: one poll (100 ms) and a
# turn, since the dead endpoint can hold at most one of the two threads at a time (~0.1-0.3 s);
# 3 s leaves room for a loaded 2-core CI machine while still far below the ~1,000 s that
# serving the dead backlog first (one 0.5 s timeout per event, two threads) would take.
LATENCY_BOUND_S = 3.0


def make_spread_events(database: Database, tenant: str) -> None:
    """HEALTHY_EVENTS events, one transaction each, HEALTHY_SPACING_S apart."""
    source = funded_source(database, tenant, HEALTHY_EVENTS * AMOUNT_MINOR)
    began = time.monotonic()
    for index in range(HEALTHY_EVENTS):
        time.sleep(max(0.0, began + index * HEALTHY_SPACING_S - time.monotonic()))
        schedule_payouts(database, tenant, source, 1)


def latencies_s(received: list[Received]) -> list[float]:
    """From each event's state change (its created_at) to the receiver's arrival."""
    return sorted(got.started_s - parse_rfc3339(json.loads(got.body)["created_at"]) / 1e6 for got in received)


def test_a_dead_endpoint_with_a_backlog_does_not_delay_another_tenants_events(
    tmp_path: Path, database_url: str, database: Database, client: TestClient, workers: list[CliProcess]
) -> None:
    env = worker_env(
        database_url,
        PAYCORE_WEBHOOK_CONCURRENCY_MAX="2",
        PAYCORE_WEBHOOK_POLL_MS="100",
        PAYCORE_WEBHOOK_TIMEOUT_MS=str(DEAD_TIMEOUT_MS),
        PAYCORE_WEBHOOK_LEASE_MS=str(2 * DEAD_TIMEOUT_MS + 1_500),
        PAYCORE_WEBHOOK_BACKOFF_MS=str(DEAD_BACKOFF_MS),
        PAYCORE_WEBHOOK_BACKOFF_MAX_MS="4000",
    )
    with Receiver() as dead, Receiver() as healthy:
        dead.default, dead.hang_s = "timeout", 1.0
        create_endpoint(client, "tenant-a", dead.url)
        create_endpoint(client, "tenant-b", healthy.url)
        worker = start_worker(workers, tmp_path, env)  # starts while the backlog is written
        make_events(database, "tenant-a", DEAD_BACKLOG)
        wait_for("the worker tries the dead endpoint", lambda: dead.received or None, WAIT_S, worker.log)
        make_spread_events(database, "tenant-b")
        arrived = healthy.wait_for(HEALTHY_EVENTS, WAIT_S)
        wait_for(
            "B's deliveries are recorded", lambda: all_delivered(database, "tenant-b", HEALTHY_EVENTS), 10, worker.log
        )
        dead_window_s = time.time() - dead.received[0].started_s
        dead_tries = len(dead.received)
        worker.stop()

    latency = latencies_s(arrived)
    print(
        f"tenant B latency over {len(latency)} events, with tenant A's {DEAD_BACKLOG} pending: "
        f"median {statistics.median(latency) * 1000:.0f} ms, max {latency[-1] * 1000:.0f} ms; "
        f"tenant A tried {dead_tries} times in {dead_window_s:.1f} s"
    )
    assert len(latency) == HEALTHY_EVENTS and latency[0] >= 0, latency
    assert latency[-1] <= LATENCY_BOUND_S, latency
    # One try per failure's backoff: each try takes the timeout plus at least half the backoff.
    tries_max = 1 + dead_window_s / ((DEAD_TIMEOUT_MS + DEAD_BACKOFF_MS / 2) / 1000)
    assert dead_tries <= tries_max, (dead_tries, tries_max)
    statuses = [row["status"] for row in deliveries(database, "tenant-a")]
    assert (len(statuses), set(statuses)) == (DEAD_BACKLOG, {"pending"})  # nothing lost, nothing given up
