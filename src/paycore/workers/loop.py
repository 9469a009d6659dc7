"""The worker loop: run every job until it has nothing left, sleep, repeat, until stopped."""

from __future__ import annotations

import logging
import threading

from paycore.workers.jobs import JOBS, WorkerContext

log = logging.getLogger(__name__)
_ROUNDS_PER_WAKE_MAX = 100  # a backlog is drained in bounded rounds, then the loop yields


def run_once(context: WorkerContext) -> dict[str, int]:
    done: dict[str, int] = {}
    for name, job, full_batch in JOBS:
        total = 0
        for _ in range(_ROUNDS_PER_WAKE_MAX):
            count = job(context)
            total += count
            if count < full_batch(context.settings):
                break
        done[name] = total
    return done


def run_forever(context: WorkerContext, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            done = run_once(context)
            if any(done.values()):
                log.info("worker round: %s", done)
        except Exception:  # a failed round is logged and retried next interval
            log.exception("worker round failed")
        stop.wait(context.settings.worker_interval_ms / 1000)
