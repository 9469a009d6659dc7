"""The worker loop: run every job until it has nothing left, sleep, repeat, until stopped."""

from __future__ import annotations

import logging
import threading

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.workers.jobs import JOBS

log = logging.getLogger(__name__)
_ROUNDS_PER_WAKE_MAX = 100  # a backlog is drained in bounded rounds, then the loop yields


def run_once(database: Database, settings: Settings) -> dict[str, int]:
    done: dict[str, int] = {}
    for job in JOBS:
        total = 0
        for _ in range(_ROUNDS_PER_WAKE_MAX):
            count = job(database, settings.worker_batch_max)
            total += count
            if count < settings.worker_batch_max:
                break
        done[job.__name__] = total
    return done


def run_forever(database: Database, settings: Settings, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            done = run_once(database, settings)
            if any(done.values()):
                log.info("worker round: %s", done)
        except Exception:  # a failed round is logged and retried next interval
            log.exception("worker round failed")
        stop.wait(settings.worker_interval_ms / 1000)
