"""Webhook delivery threads (ADR 0015): PAYCORE_WEBHOOK_CONCURRENCY_MAX per worker process,
each taking one endpoint at a time (`deliver_webhooks` with its own lease holder name). A slow
or dead endpoint holds one thread for at most one call's timeout per turn; the worker's other
jobs run in their own thread and never wait on a tenant's server.

While there is nothing to send, the process looks once per PAYCORE_WEBHOOK_POLL_MS, not once
per thread: idle threads take turns (`Dispatchers.idle`). A thread that finds work wakes the
others, so a backlog gets every thread at once. (Each look is one read. With each of 4
threads polling every 250 ms on its own, in each of two `serve --dev` processes, PostgreSQL
payments ran at 62 and 75/s against 71 and 83/s with polling off: two rounds, noisy.)"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from paycore.config import Settings
from paycore.db.availability import classify
from paycore.kit import ids, logs
from paycore.webhooks import rounds as webhooks_rounds
from paycore.workers.jobs import WorkerContext, webhook_config
from paycore.workers.retry import DatabaseRetry

log = logging.getLogger(__name__)


@dataclass
class Dispatchers:
    """The process's delivery threads and their shared schedule of looks: an idle thread takes
    the next free slot, one poll after the last one taken, so N idle threads look one after
    another, a poll apart, never together."""

    poll_s: float
    threads: list[threading.Thread] = field(default_factory=list)
    wake: threading.Condition = field(default_factory=threading.Condition)
    next_look: float = 0.0  # monotonic time of the last slot taken

    def wake_all(self) -> None:
        with self.wake:
            self.next_look = time.monotonic()  # after a burst, the slots start again from now
            self.wake.notify_all()

    def idle(self) -> None:
        with self.wake:
            now = time.monotonic()
            self.next_look = max(self.next_look, now) + self.poll_s
            self.wake.wait(self.next_look - now)


def start(context: WorkerContext, stop: threading.Event) -> Dispatchers:
    dispatchers = Dispatchers(poll_s=context.settings.webhook_poll_ms / 1000)
    count = context.settings.webhook_concurrency_max
    for index in range(count):
        holder = f"{context.worker_id}/{index}"[:64]  # a lease names its thread: leases never mix
        thread = threading.Thread(
            target=_run, args=(context, holder, dispatchers, stop), daemon=True, name=f"webhooks-{index}"
        )
        thread.start()
        dispatchers.threads.append(thread)
    return dispatchers


def _run(context: WorkerContext, holder: str, dispatchers: Dispatchers, stop: threading.Event) -> None:
    config = webhook_config(context.settings, context.keyring)
    logs.set_worker_id(holder)  # this thread's own context: its events name it
    retry = DatabaseRetry()
    while not stop.is_set():
        token = logs.set_request_id(f"job_{ids.new_ulid()}")
        try:
            made = webhooks_rounds.deliver_due(
                context.database, config, holder, endpoints_max=1, keep_going=lambda: not stop.is_set()
            )
            retry.reset()
        except Exception as error:  # logged; the thread goes on
            made = 0
            if classify(error) is not None:  # the database's own lines tell of the outage
                stop.wait(retry.next_wait_s())
                continue
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
        if made:
            dispatchers.wake_all()  # there is work: every idle thread looks now
        elif not stop.is_set():
            dispatchers.idle()


def join(dispatchers: Dispatchers, settings: Settings) -> None:
    """Wake the idle threads and wait for the busy ones to end their turn: each stops before its
    next call, so one call in flight (its whole exchange) bounds the wait."""
    dispatchers.wake_all()
    deadline = time.monotonic() + webhooks_rounds.call_bound_ms(settings.webhook_timeout_ms) / 1000
    for thread in dispatchers.threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
