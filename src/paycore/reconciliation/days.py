"""One run of a day at a time (ADR 0014): a lease on the day's row in `reconciliation_days`
(the lifecycle's lease, `paycore.lifecycle.lease`), taken by a compare-and-set, renewed by
every transaction the run writes in, released when the run completes.

Two workers, or a worker and a CLI run, in any processes, on SQLite or PostgreSQL: the second
finds the day held and gets `DayBusy` before it writes anything. No in-process lock is involved.

A run that stops renewing (its process killed with kill -9, hung, or the machine gone) keeps the
day until its lease lapses (`PAYCORE_RECONCILE_LEASE_MS`). Then the next run of the day, or a
worker that looks (`take`), takes the day and, in the same transaction, marks every other
`running` run of it `abandoned` and rolls back what it wrote (`abandon`): its open
breaks are superseded (cause `run_abandoned`), its lines seen deleted. So a day shows the
breaks of complete runs only, never half of one; the day can be run again at once.

Why this is safe against a run that is not dead but slow: every transaction of a run renews
the lease first (`renew`: a compare-and-set on `claimed_by`), and once another run has taken
the day that fails (`LeaseLost`) and the transaction writes nothing. On PostgreSQL the renewal
and the taking update the same row, so they are ordered by its lock: a run that renewed just
before is alive and the taker gets `DayBusy`.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

from paycore.db.sql import insert_or_ignore
from paycore.lifecycle import lease
from paycore.reconciliation import repository, states
from paycore.reconciliation.errors import BreakNotOpen, DayBusy
from paycore.reconciliation.models import ALL_TENANTS, reconciliation_days
from paycore.reconciliation.types import Abandoned, break_from_row

DAY_LEASE_MS: Final = 300_000  # PAYCORE_RECONCILE_LEASE_MS's default
ABANDONED_CAUSE: Final = "run_abandoned"  # why an abandoned run's breaks are superseded
ROLLBACK_BATCH: Final = 500  # breaks read per statement while rolling a run back
RUNS_OF_DAY_MAX: Final = 100  # running runs of one day abandoned per taking (more: the next one)


class LeaseLost(Exception):
    """The run's lease lapsed and another run took the day: this run stops, writing nothing more."""

    def __init__(self, day: str) -> None:
        super().__init__(f"the lease on day {day} lapsed and another run took it: this run stopped")


def _key(day: str) -> dict[str, str]:
    return {"tenant_id": ALL_TENANTS, "day": day}


def claim(connection: Connection, day: str, holder: str, *, now_us: int, lease_ms: int = DAY_LEASE_MS) -> None:
    """Take the day for `holder` (a run id), or raise DayBusy naming the run that holds it."""
    row = {**_key(day), "claimed_by": None, "claimed_until_us": None, "created_at_us": now_us}
    insert_or_ignore(connection, reconciliation_days, row, ("tenant_id", "day"))  # a day's first run
    if not lease.take(
        connection, reconciliation_days, _key(day), holder, now_us=now_us, until_us=now_us + lease_ms * 1000
    ):
        raise DayBusy(day, str(lease.holder_of(connection, reconciliation_days, _key(day))))


def take(
    connection: Connection, day: str, holder: str, *, now_us: int, actor: str, lease_ms: int = DAY_LEASE_MS
) -> list[Abandoned]:
    """`claim` the day, then abandon every other run of it still `running`: having the day
    proves their leases lapsed (or were given up). Returns the runs abandoned now."""
    claim(connection, day, holder, now_us=now_us, lease_ms=lease_ms)
    abandoned = []
    for run_id in repository.running_runs_of_day(connection, day, other_than=holder, limit=RUNS_OF_DAY_MAX):
        found = abandon(connection, run_id, day, actor=actor, now_us=now_us)
        if found is not None:
            abandoned.append(found)
    return abandoned


def abandon(connection: Connection, run_id: str, day: str, *, actor: str, now_us: int) -> Abandoned | None:
    """Mark the run `abandoned` and roll back what it wrote, in the caller's transaction: its open
    breaks superseded (with their audit and published events, as any break's change), its lines
    seen deleted. None when the run is not `running` (it completed, or another already did this:
    the status is a compare-and-set, taken first, so two never roll back one run). A break of the
    run a person resolved meanwhile stays resolved: a person's decision is not undone."""
    if not repository.abandon_run(connection, run_id, now_us=now_us):
        return None
    rolled_back = 0
    while True:  # each pass leaves fewer open breaks of the run: it ends
        rows = repository.open_breaks_of_run(connection, day, run_id, limit=ROLLBACK_BATCH)
        for row in rows:
            try:
                states.move(
                    connection,
                    break_from_row(row._mapping),
                    states.SUPERSEDED,
                    cause=ABANDONED_CAUSE,
                    actor=actor,
                    now_us=now_us,
                )
            except BreakNotOpen:
                continue  # resolved by a person since it was read
            rolled_back += 1
        if len(rows) < ROLLBACK_BATCH:
            break
    repository.forget_seen_of_run(connection, run_id)
    return Abandoned(run_id, day, rolled_back)


def renew(connection: Connection, day: str, holder: str, *, now_us: int, lease_ms: int = DAY_LEASE_MS) -> None:
    if not lease.renew(connection, reconciliation_days, _key(day), holder, until_us=now_us + lease_ms * 1000):
        raise LeaseLost(day)


def release(connection: Connection, day: str, holder: str) -> bool:
    """Give the day up; False when `holder` no longer held it (another run took it)."""
    return lease.release(connection, reconciliation_days, _key(day), holder)
