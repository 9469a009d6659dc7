"""Issue 31, point 4, as the issue states it: webhook deliveries/s and p99 latency to a local
receiver *while payments run*, for bench/targets.py (`--only webhooks-busy`).

One deployment per round on PostgreSQL (bench/_split_deploy.py): the sandbox processor, one
`paycore serve` API process and one `paycore worker` (PAYCORE_WEBHOOK_CONCURRENCY_MAX=4,
PAYCORE_WEBHOOK_POLL_MS=250 as in webhooks_bench.py; its other jobs run at their usual interval,
as in production). Four tenants with one endpoint each, plus the payments' tenant (`default`),
all pointing at webhooks_bench's receiver, so the payments' own events are delivered too.
`clients` HTTP threads post payments for the whole round (bench/_split_deploy.PaymentLoad).

- throughput: with payments running, `events` payouts are scheduled in-process (one
  `payout.scheduled` event each) before the worker starts; deliveries/s = every arrival (payout
  and payment events) from the first arrival to the last payout event's arrival.
- latency: the worker running, payments still running, events made at `rate`/s for
  `latency_s` (one transaction each, round-robin over the four tenants); latency = arrival minus
  the event's `created_at`, over every event created in that window (payment events included).

Checked: every delivery `delivered` and received (a delivery id received twice is counted),
and payments_bench.check on the payments (every 201 succeeded, one sandbox charge per payment,
`paycore ledger verify`).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

import _common as common
import _split_deploy as split
import payments_bench
import webhooks_bench
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import parse_rfc3339

TENANTS = [f"tenant-{index}" for index in range(4)]
PAYMENTS_TENANT = "default"  # local mode: a request without Paycore-Tenant acts as `default`
PAYOUT_EVENT = b'"payout.scheduled"'
DRAIN_TIMEOUT_S = 120


def _payout_arrivals(receiver: webhooks_bench.Receiver) -> int:
    with receiver.lock:
        bodies = [body for _, _, body in receiver.arrivals]
    return sum(PAYOUT_EVENT in body for body in bodies)


def _wait_payouts(receiver: webhooks_bench.Receiver, count: int) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while _payout_arrivals(receiver) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_payout_arrivals(receiver)} of {count} payout events arrived")
        time.sleep(0.1)


def _wait_drained(database: Database, receiver: webhooks_bench.Receiver) -> dict[str, int]:
    """Until every delivery is recorded `delivered` and each has arrived."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        found = webhooks_bench.delivery_counts(database)
        with receiver.lock:
            received = len({delivery_id for _, delivery_id, _ in receiver.arrivals})
        if set(found) == {"delivered"} and found["delivered"] == received:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"deliveries not drained: {found}, {received} distinct ids received")
        time.sleep(0.1)


def run_round(
    admin_url: str, clients: int, size: dict[str, Any], workdir: Path, receiver: webhooks_bench.Receiver, tag: str
) -> dict[str, Any]:
    sources: dict[str, str] = {}

    def prepare(database_url: str) -> None:
        database = Database(Settings(database_url=database_url, db_pool_size=1))
        try:
            for tenant in [*TENANTS, PAYMENTS_TENANT]:

                def one(connection: Connection, tenant: str = tenant) -> str:
                    return webhooks_bench._tenant(connection, tenant, receiver.url)

                sources[tenant] = database.transaction(one)
        finally:
            database.dispose()

    env = {  # the key the endpoints were sealed with, so that the worker can open them
        "PAYCORE_SECRETS_KEY": base64.urlsafe_b64encode(webhooks_bench.SECRETS_KEY).decode(),
        "PAYCORE_WEBHOOK_CONCURRENCY_MAX": "4",
        "PAYCORE_WEBHOOK_POLL_MS": "250",
    }
    events, rate, latency_s = size["events"], 50.0, float(size["latency_s"])
    deployment = split.deploy(admin_url, 1, 0, workdir, tag, env, prepare)
    database = Database(Settings(database_url=deployment.database_url, db_pool_size=2))
    scratch = webhooks_bench.Scratch(deployment.postgres_names[0], deployment.database_url, database, sources)
    load = None
    try:
        account = payments_bench.merchant_account(deployment.ports[0], tag)
        receiver.take()
        load = split.PaymentLoad(deployment.ports, clients, account, tag)
        time.sleep(size["warmup_s"])
        # throughput: a backlog of payout events (and the payments' own), then the worker
        for index, tenant in enumerate(TENANTS):
            webhooks_bench.schedule(scratch, tenant, events // len(TENANTS) + (index < events % len(TENANTS)))
        window = split.CpuWindow(split.deployment_groups(deployment, 1))
        window.start()
        split.start_worker(deployment, tag)
        _wait_payouts(receiver, events)
        cpu = window.stop()
        with receiver.lock:
            drained = list(receiver.arrivals)
        # latency: events at `rate`/s while payments run and the worker delivers
        began_s = time.time()
        began = time.monotonic()
        total = int(rate * latency_s)
        for index in range(total):
            time.sleep(max(0.0, began + index / rate - time.monotonic()))
            webhooks_bench.schedule(scratch, TENANTS[index % len(TENANTS)], 1)
        ended_s = time.time()
        behind_s = max(0.0, time.monotonic() - began - latency_s)
        _wait_payouts(receiver, events + total)
        paid = load.stop()
        load = None
        counts = _wait_drained(database, receiver)
        arrivals = receiver.take()
        verdict = payments_bench.check(deployment, paid["count_201"])
    finally:
        if load is not None:
            load.stop()
        database.dispose()
        deployment.stop(admin_url)
    return _summary(drained, arrivals, events, began_s, ended_s, behind_s, paid, counts, verdict, cpu)


def _summary(
    drained: list[tuple[float, str, bytes]],
    arrivals: list[tuple[float, str, bytes]],
    events: int,
    began_s: float,
    ended_s: float,
    behind_s: float,
    paid: dict[str, Any],
    counts: dict[str, int],
    verdict: str,
    cpu: dict[str, float],
) -> dict[str, Any]:
    times = sorted(at for at, _, _ in drained)
    last_payout = max(at for at, _, body in drained if PAYOUT_EVENT in body)
    in_window = [at for at in times if at <= last_payout]
    steady_s = last_payout - in_window[0]
    payout_times = sorted(at for at, _, body in drained if PAYOUT_EVENT in body)
    latencies: list[float] = []
    payment_latencies: list[float] = []
    payout_latencies: list[float] = []
    for at, _, body in arrivals:
        created = parse_rfc3339(json.loads(body)["created_at"]) / 1e6
        if began_s <= created <= ended_s:
            latencies.append(at - created)
            (payout_latencies if PAYOUT_EVENT in body else payment_latencies).append(at - created)
    for found in (latencies, payment_latencies, payout_latencies):
        found.sort()
    problems = [] if verdict == "ok" else [f"payments: {verdict}"]
    problems += [f"payment client: {error}" for error in paid["errors"][:3]]
    ids = [delivery_id for _, delivery_id, _ in arrivals]
    return {
        "per_s": (len(in_window) - 1) / steady_s if steady_s > 0 else 0.0,
        "payout_per_s": (len(payout_times) - 1) / (payout_times[-1] - payout_times[0]),
        "payment_share": 1 - len(payout_times) / len(in_window),
        "p99_ms": (common.percentile(latencies, 0.99) or 0.0) * 1000,
        "p50_ms": (common.percentile(latencies, 0.50) or 0.0) * 1000,
        "payment_p99_ms": (common.percentile(payment_latencies, 0.99) or 0.0) * 1000,
        "payout_p99_ms": (common.percentile(payout_latencies, 0.99) or 0.0) * 1000,
        "latency_events": len(latencies),
        "behind_s": behind_s,
        "payments_per_s": paid["payments_per_s"],
        "statuses": paid["statuses"],
        "delivered": counts.get("delivered", 0),
        "duplicates": len(ids) - len(set(ids)),
        "cpu": split.cpu_note(cpu),
        "problems": problems,
    }
