"""The statement of an expiry the reports imply (`expiry`, SPEC §6.1): whether the complete
reports of a span of days all leave a payment's capture out.

A day's lines are kept for its latest completed run only (`repository.forget_seen_of_day`), so
reading "the latest run" and then "its lines" at two moments could meet a newer run completing
in between, which deletes the older run's lines: the payment would look unnamed when it was
named. So, on PostgreSQL, the days' leases (`reconciliation_days`) are first read FOR SHARE:
every transaction of a run that records, completes or abandons (a chunk, its finish, the run
taking the day over) changes its day's row first, so none can commit until this transaction
ends, and a day without a row has no run (not complete: False at once). Then ONE statement
reads the rest. On one PostgreSQL that statement reads one snapshot; on Citus (ADR 0031) it is
refused as one distributed plan when its subqueries are correlated across tenants (the runs are
tenant `*`'s rows, the lines the payment's tenant's), so they are not: Citus runs each as a
subplan, at its own moment, and the lock keeps those moments equal. SQLite's writer is alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import Connection, and_, exists, literal, or_, select

from paycore.reconciliation.models import (
    ALL_TENANTS,
    reconciliation_breaks,
    reconciliation_days,
    reconciliation_runs,
    reconciliation_seen,
)

COMPLETE_SOURCE: Final = "processor"  # a person's file may be a part of the day: never complete
CAPTURE_LINE: Final = "charge"  # the report lists a capture as a charge line (SPEC §6.1)


def reports_leave_out(connection: Connection, tenant_id: str, payment_id: str, days: Sequence[tuple[str, int]]) -> bool:
    """True when every day of `days` (day, its end in µs) has a complete report and none of them
    names the payment: the day's latest completed run read the processor's report (not a file)
    and started after the day ended, it recorded no `charge` line for the payment, and the day
    has no break (not superseded) about it or quoting its id (a malformed line, a line of a
    merchant that is no tenant: a line that may have been its capture)."""
    assert days, "a span of days"
    if not _days_held(connection, [day for day, _ in days]):
        return False
    runs, seen, breaks = reconciliation_runs.c, reconciliation_seen.c, reconciliation_breaks.c
    others = reconciliation_runs.alias("latest").c  # an alias: not correlated with the run judged
    conditions = []
    for day, end_us in days:
        latest = (
            select(others.id)
            .where(others.tenant_id == ALL_TENANTS, others.day == day, others.status == "completed")
            .order_by(others.finished_at_us.desc(), others.id.desc())
            .limit(1)
            .scalar_subquery()
        )
        # The runs that recorded a capture line of the payment: not correlated with the run
        # judged (see the module: Citus).
        naming = select(seen.run_id).where(
            seen.tenant_id == tenant_id,
            seen.line_type == CAPTURE_LINE,
            seen.request_id == payment_id,
        )
        complete = exists().where(
            runs.tenant_id == ALL_TENANTS,
            runs.day == day,
            runs.id == latest,
            runs.source == COMPLETE_SOURCE,
            runs.created_at_us >= end_us,
            runs.id.not_in(naming),
        )
        about = exists().where(
            breaks.tenant_id.in_((tenant_id, ALL_TENANTS)),
            breaks.day == day,
            breaks.status != "superseded",
            or_(breaks.object_id == payment_id, breaks.line.contains(f'"{payment_id}"', autoescape=True)),
        )
        conditions += [complete, ~about]
    return connection.execute(select(literal(1)).where(and_(*conditions))).first() is not None


def _days_held(connection: Connection, days: Sequence[str]) -> bool:
    """True when every day has its lease row; on PostgreSQL those rows are then held FOR SHARE
    until the transaction ends, so no run of these days commits meanwhile (see the module)."""
    table = reconciliation_days.c
    query = select(table.day).where(table.tenant_id == ALL_TENANTS, table.day.in_(list(days)))
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(read=True)
    return len(set(connection.execute(query).scalars())) == len(set(days))
