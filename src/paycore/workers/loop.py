"""The worker loop: run every job until it has nothing left, sleep, repeat, until stopped.

A job that fails is logged (`job_failed`, with the job's name) and the round goes on with the
next job: one broken job must not starve the others. Each job's run has its own id in the
logging context (`job_<ULID>`), so its lines, audit events and processor calls correlate as a
request's do.

While the database cannot be reached (`DatabaseUnavailable`) a round stops at the first job that
found so, with no `job_failed` line (the database logs one line as the outage begins and one
as it ends), and the loop backs off with jitter (`DatabaseRetry`) instead of its interval."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from paycore.db.availability import classify
from paycore.kit import ids, logs
from paycore.workers import dispatch
from paycore.workers.jobs import DELIVER_WEBHOOKS, JOBS, Job, WorkerContext
from paycore.workers.retry import DatabaseRetry

log = logging.getLogger(__name__)
_ROUNDS_PER_WAKE_MAX = 100  # a backlog is drained in bounded rounds, then the loop yields


@dataclass
class Round:
    done: dict[str, int] = field(default_factory=dict)  # items handled, by job
    failed: list[str] = field(default_factory=list)  # the jobs that raised
    unavailable: bool = False  # a job found the database unreachable: the round stopped there


def run_once(context: WorkerContext, *, skip: frozenset[str] = frozenset()) -> Round:
    result = Round()
    for name, job, full_batch in JOBS:
        if name in skip:
            continue
        token = logs.set_request_id(f"job_{ids.new_ulid()}")
        worker = logs.set_worker_id(context.worker_id)
        try:
            result.done[name] = _drain(context, job, full_batch(context.settings))
        except Exception as error:  # the next job still runs; this one is tried again next round
            if classify(error) is not None:
                result.unavailable = True  # every other job needs the database too
                break
            result.failed.append(name)
            log.exception(
                "worker job %s failed",
                name,
                extra={
                    "event": "job_failed",
                    "job": name,
                    "worker_id": context.worker_id,
                    "error_type": type(error).__name__,
                },
            )
        finally:
            logs.reset_worker_id(worker)
            logs.reset_request_id(token)
    return result


def _drain(context: WorkerContext, job: Job, full_batch: int) -> int:
    total = 0
    for _ in range(_ROUNDS_PER_WAKE_MAX):
        count = job(context)
        total += count
        if count < full_batch:
            break
    return total


def run_forever(context: WorkerContext, stop: threading.Event) -> None:
    """The jobs in this thread; webhook deliveries in threads of their own (`dispatch`). Once
    `stop` is set, the delivery threads finish the call in flight, record it and let go of their
    endpoint before this returns (bounded by one call's time)."""
    dispatchers = dispatch.start(context, stop)
    retry = DatabaseRetry()
    try:
        while not stop.is_set():
            wait_s = context.settings.worker_interval_ms / 1000
            try:
                result = run_once(context, skip=frozenset({DELIVER_WEBHOOKS}))
                if result.unavailable:
                    wait_s = retry.next_wait_s()
                else:
                    retry.reset()
                if any(result.done.values()):
                    log.info("worker round: %s", result.done, extra={"event": "worker_round", "done": result.done})
            except Exception:  # run_once logs each job's failure; this is for anything else
                log.exception("worker round failed", extra={"event": "worker_round_failed"})
            stop.wait(wait_s)
    finally:
        stop.set()
        dispatch.join(dispatchers, context.settings)
