"""Background jobs. Each does a bounded amount of work and returns a count, so any number of
workers (threads or processes) can run them side by side: what one worker takes, it claims
in the database (row locks, SKIP LOCKED, leases), never in memory."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from paycore.config import Settings
from paycore.db import statistics
from paycore.db.engine import Database
from paycore.disputes import in_flight as dispute_answers
from paycore.idempotency import service as idempotency
from paycore.inbound import rematch as processor_inbound
from paycore.invariants import service as invariants
from paycore.keyring import Keyring
from paycore.keyring import load as load_keyring
from paycore.kit import actors, ids
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.operators import service as operators
from paycore.payments import rounds as payments_rounds
from paycore.payouts import rounds as payouts_rounds
from paycore.processor.port import Processor
from paycore.reconciliation import rounds as reconciliation_rounds
from paycore.refunds import rounds as refunds_rounds
from paycore.webhooks import rounds as webhooks_rounds


@dataclass(frozen=True)
class WorkerContext:
    database: Database
    settings: Settings
    processor: Processor
    worker_id: str
    keyring: Keyring  # opens the webhook signing secrets (ADR 0018)
    # When this worker may next look for work of a job that runs on an interval, by job name:
    # how often it looks, in memory; what it takes is still claimed in the database.
    next_look_us: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def create(
        cls, database: Database, settings: Settings, processor: Processor, keyring: Keyring | None = None
    ) -> WorkerContext:
        """`keyring` defaults as `create_app`'s does: outside local mode without PAYCORE_SECRETS_KEY
        this raises `SecretsKeyRefused`."""
        # Unique per worker (host, pid, random): a lease names its holder.
        worker_id = f"{socket.gethostname()[:24]}:{os.getpid()}:{ids.new_ulid()[-6:]}"
        keyring = keyring or load_keyring(settings, local_mode=lambda: operators.local_mode_now(database))
        return cls(database, settings, processor, worker_id, keyring)


def expire_pending_transfers(database: Database, batch_max: int) -> int:
    return database.transaction(lambda connection: ledger.expire_due(connection, now_us=now_us(), limit=batch_max))


def prune_idempotency_keys(database: Database, batch_max: int) -> int:
    return database.transaction(lambda connection: idempotency.prune(connection, now_us=now_us(), limit=batch_max))


def resolver_policy(settings: Settings) -> Policy:
    return Policy(
        attempts_max=settings.resolver_attempts_max,
        backoff_ms=settings.resolver_backoff_ms,
        backoff_max_ms=settings.resolver_backoff_max_ms,
        lease_ms=settings.claim_lease_ms,
        batch_max=settings.resolver_batch_max,
    )


def resolve_payments(context: WorkerContext) -> int:
    policy = resolver_policy(context.settings)
    return payments_rounds.resolve_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker("resolve_payments")
    )


def send_refunds(context: WorkerContext) -> int:
    policy = resolver_policy(context.settings)
    return refunds_rounds.send_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker("send_refunds")
    )


def resolve_refunds(context: WorkerContext) -> int:
    policy = resolver_policy(context.settings)
    return refunds_rounds.resolve_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker("resolve_refunds")
    )


def resolve_dispute_answers(context: WorkerContext) -> int:
    """The status query of each dispute whose answer's reply was lost (`disputes.in_flight`)."""
    policy = resolver_policy(context.settings)
    done = dispute_answers.resolve_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker(dispute_answers.JOB)
    )
    return done.claimed


def queue_payouts(context: WorkerContext) -> int:
    return payouts_rounds.queue_due(
        context.database,
        context.settings.worker_batch_max,
        actor=actors.worker("queue_payouts"),
        policy=resolver_policy(context.settings),
    )


def send_payouts(context: WorkerContext) -> int:
    policy = resolver_policy(context.settings)
    return payouts_rounds.send_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker("send_payouts")
    )


def resolve_payouts(context: WorkerContext) -> int:
    policy = resolver_policy(context.settings)
    return payouts_rounds.resolve_due(
        context.database, context.processor, policy, context.worker_id, actor=actors.worker("resolve_payouts")
    )


def rematch_webhooks(context: WorkerContext) -> int:
    return processor_inbound.rematch_due(context.database, context.settings.worker_batch_max)


def expire_transfers_job(context: WorkerContext) -> int:
    return expire_pending_transfers(context.database, context.settings.worker_batch_max)


def prune_keys_job(context: WorkerContext) -> int:
    return prune_idempotency_keys(context.database, context.settings.worker_batch_max)


def check_invariants(context: WorkerContext) -> int:
    """The money invariants (docs/invariants.md), each at most every PAYCORE_INVARIANTS_INTERVAL_MS,
    over at most PAYCORE_INVARIANTS_ROWS_MAX subjects per check. Returns the subjects checked;
    a second call within the interval finds nothing due and returns 0."""
    budget = invariants.Budget(
        rows_max=context.settings.invariants_rows_max, interval_ms=context.settings.invariants_interval_ms
    )
    return invariants.run_due(context.database, budget, context.worker_id).subjects_checked


RECONCILE_DAYS = "reconcile_days"
KEEP_STATISTICS = "keep_statistics"


def keep_statistics(context: WorkerContext) -> int:
    """PostgreSQL with autovacuum off: the planner's statistics of the tables that grew
    (`db.statistics.analyze_grown`), looked at most every
    `statistics.POSTGRES_ANALYZE_INTERVAL_SECONDS`; the tables analyzed. SQLite keeps its own
    (`PRAGMA optimize` on the pooled connections)."""
    if not context.database.is_postgres:
        return 0
    now = now_us()
    if context.next_look_us.get(KEEP_STATISTICS, 0) > now:
        return 0
    context.next_look_us[KEEP_STATISTICS] = now + statistics.POSTGRES_ANALYZE_INTERVAL_SECONDS * 1_000_000
    with context.database.engine.connect() as connection:
        return len(statistics.analyze_grown(connection))


def reconcile_days(context: WorkerContext) -> int:
    """Each closed UTC day once it is PAYCORE_RECONCILE_DELAY_MS past its end, from the processor's
    report (docs/reconciliation.md, "The scheduled job"). This worker looks at most every
    PAYCORE_RECONCILE_INTERVAL_MS, and at once again while days are due; it returns the days
    reconciled, at most `reconciliation_rounds.DAYS_PER_RUN_MAX` per call."""
    settings = context.settings
    now = now_us()
    if context.next_look_us.get(RECONCILE_DAYS, 0) > now:
        return 0
    # Set before the work: a call that fails waits an interval too, it does not retry every round.
    context.next_look_us[RECONCILE_DAYS] = now + settings.reconcile_interval_ms * 1_000
    schedule = reconciliation_rounds.Schedule(
        delay_ms=settings.reconcile_delay_ms,
        lookback_days=settings.reconcile_lookback_days,
        grace_ms=settings.reconcile_grace_ms,
        lease_ms=settings.reconcile_lease_ms,
    )
    actor = actors.worker(RECONCILE_DAYS)
    done = reconciliation_rounds.reconcile_due(context.database, context.processor, schedule, now_us=now, actor=actor)
    if done.more:
        context.next_look_us[RECONCILE_DAYS] = now
    return done.reconciled


def webhook_config(settings: Settings, keyring: Keyring) -> webhooks_rounds.Config:
    return webhooks_rounds.Config(
        timeout_ms=settings.webhook_timeout_ms,
        lease_ms=settings.webhook_lease_ms,
        batch_max=settings.webhook_batch_max,
        backoff_ms=settings.webhook_backoff_ms,
        backoff_max_ms=settings.webhook_backoff_max_ms,
        retry_window_ms=settings.webhook_retry_window_ms,
        disable_after_ms=settings.webhook_disable_after_ms,
        keyring=keyring,
    )


DELIVER_WEBHOOKS = "deliver_webhooks"


def deliver_webhooks(context: WorkerContext) -> int:
    """One round of webhook delivery over up to PAYCORE_WEBHOOK_CONCURRENCY_MAX endpoints, one
    after another. `paycore worker` runs it in that many threads of their own instead
    (paycore.workers.dispatch), so a slow endpoint never holds up the other jobs."""
    return webhooks_rounds.deliver_due(
        context.database,
        webhook_config(context.settings, context.keyring),
        context.worker_id,
        endpoints_max=context.settings.webhook_concurrency_max,
    )


Job = Callable[[WorkerContext], int]
# (name, job, its batch bound: a round returning less has drained the backlog)
JOBS: tuple[tuple[str, Job, Callable[[Settings], int]], ...] = (
    ("expire_pending_transfers", expire_transfers_job, lambda s: s.worker_batch_max),
    ("prune_idempotency_keys", prune_keys_job, lambda s: s.worker_batch_max),
    ("resolve_payments", resolve_payments, lambda s: s.resolver_batch_max),
    ("send_refunds", send_refunds, lambda s: s.resolver_batch_max),
    ("resolve_refunds", resolve_refunds, lambda s: s.resolver_batch_max),
    (dispute_answers.JOB, resolve_dispute_answers, lambda s: s.resolver_batch_max),
    ("queue_payouts", queue_payouts, lambda s: s.worker_batch_max),
    ("send_payouts", send_payouts, lambda s: s.resolver_batch_max),
    ("resolve_payouts", resolve_payouts, lambda s: s.resolver_batch_max),
    ("rematch_webhooks", rematch_webhooks, lambda s: s.worker_batch_max),
    ("check_invariants", check_invariants, lambda s: s.invariants_rows_max),
    (RECONCILE_DAYS, reconcile_days, lambda s: reconciliation_rounds.DAYS_PER_RUN_MAX),
    (DELIVER_WEBHOOKS, deliver_webhooks, lambda s: s.webhook_concurrency_max * s.webhook_batch_max),
    (KEEP_STATISTICS, keep_statistics, lambda s: 1),  # by time: a second call within the interval returns 0
)
