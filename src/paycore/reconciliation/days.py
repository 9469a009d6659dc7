"""One run of a day at a time (ADR 0014): a lease on the day's row in `reconciliation_days`,
taken by a compare-and-set, renewed with each chunk, released at the end.

Two workers, or a worker and a CLI run, in any processes, on SQLite or PostgreSQL: the second
finds the day held and gets `DayBusy` before it writes anything. A run that dies leaves a lease
that lapses after `DAY_LEASE_MS`; the next run takes the day and starts it again (the unique
keys of breaks, fees and seen lines make that harmless). No in-process lock is involved.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

from paycore.reconciliation import repository
from paycore.reconciliation.errors import DayBusy

DAY_LEASE_MS: Final = 300_000  # renewed with every chunk: a chunk takes well under a second


class LeaseLost(Exception):
    """The run's lease lapsed and another run took the day: this run stops, writing nothing more."""

    def __init__(self, day: str) -> None:
        super().__init__(f"the lease on day {day} lapsed and another run took it: this run stopped")


def claim(connection: Connection, day: str, holder: str, *, now_us: int, lease_ms: int = DAY_LEASE_MS) -> None:
    """Take the day for `holder` (a run id), or raise DayBusy naming the run that holds it."""
    other = repository.claim_day(connection, day, holder, now_us=now_us, until_us=now_us + lease_ms * 1000)
    if other is not None:
        raise DayBusy(day, other)


def renew(connection: Connection, day: str, holder: str, *, now_us: int, lease_ms: int = DAY_LEASE_MS) -> None:
    if not repository.renew_day(connection, day, holder, until_us=now_us + lease_ms * 1000):
        raise LeaseLost(day)


def release(connection: Connection, day: str, holder: str) -> None:
    repository.release_day(connection, day, holder)
