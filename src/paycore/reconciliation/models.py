"""Reconciliation's tables (ADR 0014, docs/reconciliation.md).

`reconciliation_runs`: one row per run of a day's report, with its counts and its status
(`running`, `completed`, or `abandoned`: it stopped before completing and its breaks were rolled
back, migration 0018). Not a tenant's data:
a report covers every merchant, so its rows use the tenant id `*`, which no tenant can have
(SPEC §3.2), to keep every table's key led by `tenant_id`.

`reconciliation_breaks`: one row per finding, in the tenant the report line names, with the line
as read, the object it concerns and that object's status when found. `finding_key` (the type,
the line type and the object's id, or a malformed line's number and fingerprint) is unique per
tenant and day among breaks not superseded: a finding met again, by a re-run or a second
worker, is not stored twice (`seen_run_id` says which run met it last); one a corrected report
dropped is superseded, and stored anew if a later report brings it back.

`reconciliation_days`: the lease on a day (tenant id `*`), so that one run reconciles it at a time
across processes. `reconciliation_seen`: the lines a run has read (staging: a second line with
the same key is a `duplicate_line`; `missing_at_processor` is an anti-join against it).
`reconciliation_fees`: the processor's fee per object, booked once.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

from paycore.db.metadata import ALL_TENANTS, ID_LENGTH, created_at_column, metadata, tenant_id_column

__all__ = ["ALL_TENANTS"]  # re-exported: reconciliation's rows of every tenant
DAY_LENGTH: Final = 10  # YYYY-MM-DD
RUN_ID_PREFIX: Final = "rcn_"  # a break a report run stored names its run; one a webhook stored, the webhook
FINDING_KEY_LENGTH: Final = 200
BREAK_STATUSES: Final = ("open", "resolved", "superseded")
RUN_STATUSES: Final = ("running", "completed", "abandoned")
_NOT_SUPERSEDED: Final = "status <> 'superseded'"

reconciliation_runs = Table(
    "reconciliation_runs",
    metadata,
    tenant_id_column(),  # always ALL_TENANTS
    Column("id", String(ID_LENGTH), nullable=False),
    Column("day", String(DAY_LENGTH), nullable=False),
    Column("source", String(16), nullable=False),  # file | processor
    Column("report_sha256", String(64), nullable=True),  # set when the run ends
    Column("status", String(16), nullable=False),  # RUN_STATUSES
    Column("lines_read", BigInteger, nullable=False),
    Column("matched", BigInteger, nullable=False),
    Column("breaks_found", BigInteger, nullable=False),  # new breaks stored by this run
    Column("resolved", BigInteger, nullable=False),  # items moved by what the report proved
    created_at_column(),
    Column("finished_at_us", BigInteger, nullable=True),  # when it completed or was abandoned
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("status IN ('running', 'completed', 'abandoned')", name="status"),
    Index("ix_reconciliation_runs_day", "day", "id"),
)

reconciliation_breaks = Table(
    "reconciliation_breaks",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("run_id", String(ID_LENGTH), nullable=False),
    Column("day", String(DAY_LENGTH), nullable=False),
    Column("type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("finding_key", String(FINDING_KEY_LENGTH), nullable=False),
    Column("object_type", String(16), nullable=True),  # payment | refund | payout | dispute; NULL: none found
    Column("object_id", String(ID_LENGTH), nullable=True),
    Column("object_status", String(20), nullable=True),  # the object's status when the break was found
    Column("line_number", BigInteger, nullable=True),
    Column("line", Text, nullable=False),  # the report line as read: a JSON array of its fields
    Column("detail", Text, nullable=False),
    Column("resolution", String(32), nullable=True),  # set when a person resolves it
    Column("note", Text, nullable=True),
    Column("resolved_by", String(64), nullable=True),
    Column("resolved_at_us", BigInteger, nullable=True),
    created_at_column(),
    Column("seen_run_id", String(ID_LENGTH), nullable=True),  # the last run that found it
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("status IN ('open', 'resolved', 'superseded')", name="status"),
    Index("ix_reconciliation_breaks_status", "tenant_id", "status", "id"),
    Index("ix_reconciliation_breaks_object", "tenant_id", "object_id"),  # migration 0016
    Index(
        "uq_reconciliation_breaks_finding",
        "tenant_id",
        "day",
        "finding_key",
        unique=True,
        sqlite_where=text(_NOT_SUPERSEDED),
        postgresql_where=text(_NOT_SUPERSEDED),
    ),
)

reconciliation_days = Table(
    "reconciliation_days",
    metadata,
    tenant_id_column(),  # always ALL_TENANTS
    Column("day", String(DAY_LENGTH), nullable=False),
    Column("claimed_by", String(ID_LENGTH), nullable=True),  # the run holding the day
    Column("claimed_until_us", BigInteger, nullable=True),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "day"),
)

# Staging, not a tenant's data: keyed by run first, for the anti-join and the clean-up.
reconciliation_seen = Table(
    "reconciliation_seen",
    metadata,
    Column("run_id", String(ID_LENGTH), nullable=False),
    Column("line_type", String(16), nullable=False),
    tenant_id_column(),
    Column("request_id", String(ID_LENGTH), nullable=False),
    Column("line_number", BigInteger, nullable=False),
    PrimaryKeyConstraint("run_id", "line_type", "tenant_id", "request_id"),
)

reconciliation_fees = Table(
    "reconciliation_fees",
    metadata,
    tenant_id_column(),
    Column("object_type", String(16), nullable=False),
    Column("object_id", String(ID_LENGTH), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("fee_minor", BigInteger, nullable=False),
    Column("run_id", String(ID_LENGTH), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "object_type", "object_id"),
    CheckConstraint("fee_minor > 0", name="fee_minor"),
)
