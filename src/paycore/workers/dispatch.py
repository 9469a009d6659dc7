"""Webhook delivery threads (ADR 0015): PAYCORE_WEBHOOK_CONCURRENCY_MAX per worker process,
each taking one endpoint at a time (`deliver_webhooks` with its own lease holder name), and
looking again every PAYCORE_WEBHOOK_POLL_MS while there is nothing to send. A slow or dead
endpoint holds one thread for at most one call's timeout per turn; the worker's other jobs
run in their own thread and never wait on a tenant's server."""

from __future__ import annotations

import logging
import threading
import time

from paycore.config import Settings
from paycore.kit import ids, logs
from paycore.webhooks import jobs as webhooks_jobs
from paycore.workers.jobs import WorkerContext, webhook_config

log = logging.getLogger(__name__)


def start(context: WorkerContext, stop: threading.Event) -> list[threading.Thread]:
    threads = []
    for index in range(context.settings.webhook_concurrency_max):
        holder = f"{context.worker_id}/{index}"[:64]  # a lease names its thread: leases never mix
        thread = threading.Thread(target=_run, args=(context, holder, stop), daemon=True, name=f"webhooks-{index}")
        thread.start()
        threads.append(thread)
    return threads


def _run(context: WorkerContext, holder: str, stop: threading.Event) -> None:
    config = webhook_config(context.settings)
    while not stop.is_set():
        token = logs.set_request_id(f"job_{ids.new_ulid()}")
        try:
            made = webhooks_jobs.deliver_due(
                context.database, config, holder, endpoints_max=1, keep_going=lambda: not stop.is_set()
            )
        except Exception as error:  # logged; the thread goes on
            made = 0
            log.exception(
                "webhook delivery round failed",
                extra={
                    "event": "job_failed",
                    "job": "deliver_webhooks",
                    "worker_id": holder,
                    "error_type": type(error).__name__,
                },
            )
        finally:
            logs.reset_request_id(token)
        if made == 0:
            stop.wait(context.settings.webhook_poll_ms / 1000)


def join(threads: list[threading.Thread], settings: Settings) -> None:
    """Wait for the delivery threads to end their turn: each stops before its next call, so one
    call in flight (its whole exchange) bounds the wait."""
    deadline = time.monotonic() + webhooks_jobs.call_bound_ms(settings.webhook_timeout_ms) / 1000
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
