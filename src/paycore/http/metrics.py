"""Prometheus metrics (SPEC §12): request latency by route and status, the in-doubt gauges, the
open authorizations (SPEC §6.1) and the disputes (SPEC §6.2), read from the database at scrape
time so every process reports the same truth."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import Scope

from paycore.db.engine import Database
from paycore.disputes import service as disputes
from paycore.disputes import states as dispute_states
from paycore.invariants import service as invariants
from paycore.kit.clock import now_us
from paycore.monitoring import service as monitoring
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.payouts import states as payout_states
from paycore.reconciliation import queries as reconciliation_queries
from paycore.refunds import service as refunds
from paycore.webhooks import service as webhooks

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class InDoubtCollector(Collector):
    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._database.read() as connection:
            summaries = {
                "payment": payments.MACHINE.in_doubt_summary(connection),
                "refund": refunds.MACHINE.in_doubt_summary(connection),
                "payout": payouts.MACHINE.in_doubt_summary(connection),
            }
            payouts_by_state = payouts.count_by_status(connection)
            authorizations, authorized_since_us = payments.authorizations_open(connection)
            working = {
                "payment": payments.MACHINE.working_since_us(connection),
                "refund": refunds.MACHINE.working_since_us(connection),
                "payout": payouts.MACHINE.working_since_us(connection),
            }
        items = GaugeMetricFamily("paycore_in_doubt_items", "Items whose outcome is not known yet", labels=["kind"])
        age = GaugeMetricFamily(
            "paycore_in_doubt_oldest_age_seconds", "Age of the oldest in-doubt item (0 if none)", labels=["kind"]
        )
        now = now_us()
        for kind, (count, oldest_us) in summaries.items():
            items.add_metric([kind], count)
            age.add_metric([kind], 0 if oldest_us is None else max(0, now - oldest_us) // 1_000_000)
        yield items
        yield age
        claimed = GaugeMetricFamily(
            "paycore_work_claimed_oldest_age_seconds",
            "How long the oldest item in its working state (processing) has been there (0 if none)",
            labels=["kind"],
        )
        for kind, since_us in working.items():
            claimed.add_metric([kind], 0 if since_us is None else max(0, now - since_us) // 1_000_000)
        yield claimed
        by_state = GaugeMetricFamily("paycore_payouts", "Payouts by state", labels=["state"])
        for state in payout_states.STATUSES:
            by_state.add_metric([payout_states.public(state)], payouts_by_state.get(state, 0))
        yield by_state
        yield GaugeMetricFamily(
            "paycore_authorizations_open",
            "Payments authorized and not yet captured, canceled or expired (requires_capture)",
            value=authorizations,
        )
        yield GaugeMetricFamily(
            "paycore_authorization_oldest_age_seconds",
            "Age of the oldest open authorization, since it was made (0 if none)",
            value=0 if authorized_since_us is None else max(0, now - authorized_since_us) // 1_000_000,
        )


class DisputesCollector(Collector):
    """Disputes by status and the nearest evidence deadline of those awaiting an answer (SPEC
    §6.2, docs/monitoring.md), over every tenant, as the open authorizations are."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._database.read() as connection:
            counts = disputes.count_by_status(connection)
            due_us = disputes.evidence_due_first(connection)
        by_status = GaugeMetricFamily("paycore_disputes", "Disputes by status", labels=["status"])
        for status in dispute_states.STATUSES:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        # +Inf when no dispute awaits an answer: no deadline, infinitely far (a documented value,
        # not an absent series, so that the alert and the panel always have one to read).
        yield GaugeMetricFamily(
            "paycore_dispute_evidence_due_in_seconds",
            "Seconds until the nearest evidence deadline of a dispute awaiting an answer"
            " (needs_response, warning_needs_response; negative once passed; +Inf if none)",
            value=math.inf if due_us is None else _whole_seconds(due_us - now_us()),
        )


def _whole_seconds(duration_us: int) -> int:
    """Whole seconds toward zero (floor division would make -0.5 s a whole second passed)."""
    seconds = abs(duration_us) // 1_000_000
    return seconds if duration_us >= 0 else -seconds


class InvariantsCollector(Collector):
    """What the invariant checks recorded (paycore.invariants), read from the database: the
    worker that runs the checks is another process than the one scraped."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._database.read() as connection:
            counts = invariants.violations_by_check(connection)
        found = CounterMetricFamily(
            "paycore_invariant_violations",
            "Invariant violations found, by check (docs/invariants.md)",
            labels=["check"],
        )
        for name, count in counts.items():
            found.add_metric([name], count)
        yield found
        yield CounterMetricFamily(
            "paycore_duplicate_money_movements",
            "Money moved twice, as found by the checks payment_charged_twice and payout_sent_twice (must stay 0)",
            value=invariants.duplicate_movements(counts),
        )


class ReconciliationCollector(Collector):
    """What reconciliation runs found and did (docs/reconciliation.md), read from the database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self._database.read() as connection:
            counts = reconciliation_queries.breaks_by_type_and_status(connection)
            resolved, finished_at_us = reconciliation_queries.runs_summary(connection)
        breaks = GaugeMetricFamily(
            "paycore_reconciliation_breaks", "Reconciliation breaks by type and status", labels=["type", "status"]
        )
        for kind in reconciliation_queries.BREAK_TYPES:
            for status in reconciliation_queries.BREAK_STATUSES:
                breaks.add_metric([kind, status], counts.get((kind, status), 0))
        yield breaks
        yield CounterMetricFamily(
            "paycore_reconciliation_items_resolved",
            "Payments, refunds and payouts moved by what a settlement report proved",
            value=resolved,
        )
        if finished_at_us is not None:
            yield GaugeMetricFamily(
                "paycore_reconciliation_last_run_age_seconds",
                "Seconds since the newest reconciliation run finished (absent before the first)",
                value=max(0, now_us() - finished_at_us) // 1_000_000,
            )


class WebhooksCollector(Collector):
    """Outgoing webhooks (docs/webhooks.md), read from the database: the delivery threads run
    in worker processes, not the one scraped."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self._database.read() as connection:
            health = webhooks.health(connection)
        attempts = CounterMetricFamily(
            "paycore_webhook_deliveries",
            "Webhook delivery attempts by outcome (delivered: 2xx; failed: another answer, a timeout, no connection)",
            labels=["outcome"],
        )
        for outcome in ("delivered", "failed"):
            attempts.add_metric([outcome], health.attempts_by_outcome.get(outcome, 0))
        yield attempts
        oldest = GaugeMetricFamily(
            "paycore_webhook_oldest_undelivered_age_seconds",
            "Age of the oldest event not yet delivered, per endpoint with one pending",
            labels=["tenant_id", "endpoint_id"],
        )
        now = now_us()
        for tenant_id, endpoint_id, oldest_us in health.oldest_pending_us:
            oldest.add_metric([tenant_id, endpoint_id], max(0, now - oldest_us) // 1_000_000)
        yield oldest
        yield GaugeMetricFamily(
            "paycore_webhook_endpoints_disabled",
            "Webhook endpoints disabled (by paycore or their tenant)",
            value=health.disabled_endpoints,
        )


class OperationsCollector(Collector):
    """Worker lag, the age of open breaks, and escaped money defects (paycore.monitoring):
    computed from the data at scrape time, the same functions the console's front page reads."""

    def __init__(self, database: Database, schedules: monitoring.Schedules) -> None:
        self._database = database
        self._schedules = schedules

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = now_us()
        with self._database.read() as connection:
            lag = monitoring.worker_lag_us(connection, self._schedules, now_us=now)
            open_breaks = reconciliation_queries.open_breaks_by_type(connection)
            defects = monitoring.escaped_defects(connection)
            item_faults = monitoring.item_faults(connection)
        lag_family = GaugeMetricFamily(
            "paycore_worker_lag_seconds",
            "How late the oldest work item a job should have taken by now is (0: nothing late)",
            labels=["job"],
        )
        for job, lag_us in lag.items():
            lag_family.add_metric([job], lag_us // 1_000_000)
        yield lag_family
        oldest = GaugeMetricFamily(
            "paycore_reconciliation_break_oldest_age_seconds",
            "Age of the oldest open reconciliation break (0 if none)",
            labels=["type"],
        )
        for kind in reconciliation_queries.BREAK_TYPES:
            found = open_breaks.get(kind)
            oldest.add_metric([kind], 0 if found is None else max(0, now - found[1]) // 1_000_000)
        yield oldest
        escaped = CounterMetricFamily(
            "paycore_escaped_money_defects",
            "Money that moved wrongly and was caught after the fact, by kind (docs/operations-console.md)",
            labels=["kind"],
        )
        for kind, count in defects.items():
            escaped.add_metric([kind], count)
        yield escaped
        faulted = CounterMetricFamily(
            "paycore_worker_item_faults",
            "Items a worker round could not move (left as they were, for a person), by job",
            labels=["job"],
        )
        for job, count in item_faults.items():
            faulted.add_metric([job], count)
        yield faulted


class Metrics:
    """One registry per application (tests build many apps in one process)."""

    def __init__(self, database: Database, schedules: monitoring.Schedules) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "paycore_http_request_duration_seconds",
            "HTTP request latency by route template, method and status",
            ["route", "method", "status"],
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.registry.register(InDoubtCollector(database))
        self.registry.register(DisputesCollector(database))
        self.registry.register(InvariantsCollector(database))
        self.registry.register(ReconciliationCollector(database))
        self.registry.register(WebhooksCollector(database))
        self.registry.register(OperationsCollector(database, schedules))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def route_template(scope: Scope) -> str:
    """The route template a request matched (`/v1/payments/{payment_id}`), never the raw
    path, so ids do not explode a label set or a log index; "unmatched" if none did."""
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    # A mounted app (the --dev sandbox at /sandbox) sets root_path to its mount point.
    return scope.get("root_path", "") + path if path else "unmatched"
