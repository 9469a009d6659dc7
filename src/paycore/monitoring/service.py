"""What operations watch (SPEC §12; docs/operations-console.md, "Metrics"): the front
page of the console and the gauges of `/metrics` read the same functions, so a number on the
page and its metric never disagree.

**Worker lag** (`worker_lag_us`): for each worker job, how late the oldest item it should have
taken by now is: now minus when that item fell due (its next attempt, its expiry, its day), or
0 when nothing is late. A job that keeps up shows a lag of at most its polling interval.

**Escaped money defects** (`escaped_defects`): money that moved wrongly and was caught after the
fact, counted by kind, never decreasing (a finding stays found, even once resolved or
superseded):

- `amount_mismatch`, `currency_mismatch`, `status_mismatch`, `missing_in_paycore`,
  `manual_resolution_contradicted`: reconciliation breaks of these types (the processor moved
  money otherwise than paycore recorded, or moved money paycore never recorded, or a person's
  manual outcome was wrong);
- `invariant_violation`: money invariants found broken by the running checks
  (docs/invariants.md), but the two below;
- `duplicate_money_movement`: a payment charged twice or a payout sent twice (the checks
  `payment_charged_twice`, `payout_sent_twice`): must stay 0.

Not counted: `missing_at_processor` (paycore's record with no report line yet: a late report,
not money moved wrongly, until a person finds otherwise), `fee_mismatch`, a report's own
faults (`duplicate_line`, `malformed_line`, `unknown_account`: a merchant that is no tenant),
and `item_not_moved` (an item paycore could not move to what the report proves: its books and
its state are for a person to compare, `item_faults` below).

**Items a worker could not move** (`item_faults`, `faulted`; `lifecycle.faults`): the faults
worker rounds met, by job, never decreasing, and the items left on one now, for a person.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Connection

from paycore.disputes import in_flight as dispute_answers
from paycore.idempotency import service as idempotency
from paycore.inbound import rematch as inbound
from paycore.invariants import service as invariants
from paycore.kit import clock
from paycore.ledger import service as ledger
from paycore.lifecycle import faults
from paycore.lifecycle.machine import Machine
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import service as reconciliation
from paycore.refunds import service as refunds
from paycore.reports import activity as over_time
from paycore.reports import losses
from paycore.webhooks import service as webhooks
from paycore.webhooks.types import Endpoint

KINDS: Final = ("payment", "refund", "payout")
DEFECT_BREAK_TYPES: Final = (
    "amount_mismatch",
    "currency_mismatch",
    "status_mismatch",
    "missing_in_paycore",
    "manual_resolution_contradicted",
)
DEFECT_KINDS: Final = (*DEFECT_BREAK_TYPES, "invariant_violation", "duplicate_money_movement")
JOBS: Final = (
    "expire_pending_transfers",
    "prune_idempotency_keys",
    "resolve_payments",
    "send_refunds",
    "resolve_refunds",
    "resolve_dispute_answers",
    "queue_payouts",
    "send_payouts",
    "resolve_payouts",
    "rematch_webhooks",
    "check_invariants",
    "reconcile_days",
    "deliver_webhooks",
)
_MACHINES: Final[dict[str, Machine[Any]]] = {
    "payment": payments.MACHINE,
    "refund": refunds.MACHINE,
    "payout": payouts.MACHINE,
}


@dataclass(frozen=True)
class Schedules:
    """The worker settings lag is measured against (PAYCORE_INVARIANTS_INTERVAL_MS, ...)."""

    invariants_interval_ms: int
    reconcile_delay_ms: int
    reconcile_lookback_days: int


def worker_lag_us(connection: Connection, schedules: Schedules, *, now_us: int) -> dict[str, int]:
    """Each job's lag in microseconds (0: nothing late). One indexed query per job."""
    due: dict[str, Callable[[], int | None]] = {
        "expire_pending_transfers": lambda: ledger.oldest_expiry_due_us(connection, now_us=now_us),
        "prune_idempotency_keys": lambda: idempotency.oldest_expired_us(connection, now_us=now_us),
        "resolve_payments": lambda: payments.MACHINE.oldest_due_us(
            connection, ("processing", "in_doubt"), now_us=now_us
        ),
        "send_refunds": lambda: refunds.MACHINE.oldest_due_us(connection, ("pending",), now_us=now_us),
        "resolve_refunds": lambda: refunds.MACHINE.oldest_due_us(connection, ("processing", "in_doubt"), now_us=now_us),
        "resolve_dispute_answers": lambda: dispute_answers.oldest_due_us(connection, now_us=now_us),
        "queue_payouts": lambda: payouts.oldest_due_to_queue_us(connection, now_us=now_us),
        "send_payouts": lambda: payouts.MACHINE.oldest_due_us(connection, ("queued",), now_us=now_us),
        "resolve_payouts": lambda: payouts.MACHINE.oldest_due_us(connection, payouts.MACHINE.waiting, now_us=now_us),
        "rematch_webhooks": lambda: inbound.oldest_rematch_due_us(connection, now_us=now_us),
        "check_invariants": lambda: _invariants_due_us(connection, schedules),
        "reconcile_days": lambda: _reconcile_due_us(connection, schedules, now_us),
        "deliver_webhooks": lambda: webhooks.oldest_due_us(connection, now_us=now_us),
    }
    assert tuple(due) == JOBS
    return {job: max(0, now_us - since) if (since := find()) is not None else 0 for job, find in due.items()}


def _invariants_due_us(connection: Connection, schedules: Schedules) -> int | None:
    """When the check that has waited longest fell due again (a check never run: not yet due)."""
    runs = invariants.last_runs(connection)
    return None if not runs else min(runs.values()) + schedules.invariants_interval_ms * 1000


def _reconcile_due_us(connection: Connection, schedules: Schedules, now_us: int) -> int | None:
    days = reconciliation.due_days(
        connection,
        now_us=now_us,
        delay_ms=schedules.reconcile_delay_ms,
        lookback_days=schedules.reconcile_lookback_days,
    )
    if not days:
        return None
    return clock.day_start_us(dt.date.fromisoformat(days[0])) + clock.DAY_US + schedules.reconcile_delay_ms * 1000


def escaped_defects(connection: Connection) -> dict[str, int]:
    """Escaped money defects by kind (see the module): every kind, 0 where there is none."""
    breaks = reconciliation_queries.breaks_by_type_and_status(connection)
    found = {kind: sum(count for (type_, _), count in breaks.items() if type_ == kind) for kind in DEFECT_BREAK_TYPES}
    checks = invariants.violations_by_check(connection)
    duplicates = invariants.duplicate_movements(checks)
    found["invariant_violation"] = sum(checks.values()) - duplicates
    found["duplicate_money_movement"] = duplicates
    return found


def item_faults(connection: Connection) -> dict[str, int]:
    """Faults worker rounds met on an item, ever, by job (`lifecycle.faults`): the counter."""
    return faults.counts_by_job(connection)


def faulted(connection: Connection, *, tenant_id: str | None, limit: int) -> dict[str, list[Any]]:
    """By kind, the items a worker round could not move and left for a person, oldest first."""
    return {kind: machine.faulted(connection, tenant_id=tenant_id, limit=limit) for kind, machine in _MACHINES.items()}


@dataclass(frozen=True)
class Overview:
    """The console's front page, for one tenant or every one (`tenant_id` None)."""

    now_us: int
    in_doubt: dict[str, tuple[int, int | None]]  # kind -> (count, oldest in doubt since)
    open_breaks: dict[str, tuple[int, int]]  # type -> (count, oldest found at)
    worker_lag_us: dict[str, int]
    today: dict[str, dict[str, int]]  # kind -> public status -> created today (UTC)
    losses_this_month: dict[str, int]  # currency -> loss in minor units, since the 1st (UTC)
    invariants_checked_at_us: int | None  # the most recent check run
    invariant_violations: int
    failing_endpoints: list[Endpoint] = field(default_factory=list)
    faulted: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # kind -> (count, oldest fault)
    # The charts' data: the last 24 hours by hour, the last 30 days by UTC day (`reports.activity`).
    activity: tuple[over_time.Activity, ...] = ()


def overview(connection: Connection, schedules: Schedules, *, tenant_id: str | None, now_us: int) -> Overview:
    today = clock.utc_day(now_us)
    runs = invariants.last_runs(connection)
    in_doubt = {
        kind: machine.summary(connection, "in_doubt", tenant_id=tenant_id) for kind, machine in _MACHINES.items()
    }
    open_breaks = reconciliation_queries.open_breaks_by_type(connection, tenant_id=tenant_id)
    levels_now = {kind: count for kind, (count, _) in in_doubt.items()}
    levels_now[over_time.BREAK] = sum(count for count, _ in open_breaks.values())
    return Overview(
        now_us=now_us,
        in_doubt=in_doubt,
        open_breaks=open_breaks,
        worker_lag_us=worker_lag_us(connection, schedules, now_us=now_us),
        today={
            kind: machine.counts(connection, tenant_id=tenant_id, created_gte_us=clock.day_start_us(today))
            for kind, machine in _MACHINES.items()
        },
        losses_this_month=losses.totals(connection, tenant_id=tenant_id, from_day=today.replace(day=1).isoformat()),
        invariants_checked_at_us=max(runs.values()) if runs else None,
        invariant_violations=sum(invariants.violations_by_check(connection).values()),
        failing_endpoints=webhooks.failing_endpoints(connection, tenant_id),
        faulted={kind: machine.faulted_summary(connection, tenant_id=tenant_id) for kind, machine in _MACHINES.items()},
        activity=over_time.activity(connection, tenant_id=tenant_id, now_us=now_us, levels_now=levels_now),
    )
