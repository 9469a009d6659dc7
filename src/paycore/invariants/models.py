"""The invariant checks' tables (docs/invariants.md).

`invariant_violations`: one row per (tenant, check, subject) ever found broken; written once,
when first found, with the audit event of that finding. Never updated: the metric
`paycore_invariant_violations_total{check}` counts these rows.

`invariant_cursors`: per check, where the next run starts (the last subject key checked) and
when the last run was. A run claims a check when `last_run_at_us` is an interval old, under the
row's lock, so any number of workers run each check at most once per interval (a changed
interval applies at once), and advances its cursor in the same transaction as its findings.
Not a tenant's data: its rows use the tenant id `*`, which no tenant can have (SPEC §3.2), to
keep every table's key led by `tenant_id`.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import BigInteger, Column, PrimaryKeyConstraint, String, Table, Text

from paycore.db.metadata import ID_LENGTH, TENANT_ID_LENGTH, created_at_column, metadata, tenant_id_column

ALL_TENANTS: Final = "*"
CHECK_NAME_LENGTH: Final = 48

invariant_violations = Table(
    "invariant_violations",
    metadata,
    tenant_id_column(),
    Column("check_name", String(CHECK_NAME_LENGTH), nullable=False),
    Column("subject_id", String(ID_LENGTH), nullable=False),  # an account, transfer, payment, payout, currency
    Column("detail", Text, nullable=False),  # what was found, in figures (no secrets)
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "check_name", "subject_id"),
)

invariant_cursors = Table(
    "invariant_cursors",
    metadata,
    tenant_id_column(),  # always ALL_TENANTS
    Column("check_name", String(CHECK_NAME_LENGTH), nullable=False),
    # The last subject key the previous run checked; ('', '') = start from the beginning.
    Column("after_tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    Column("after_id", String(ID_LENGTH), nullable=False),
    Column("last_run_at_us", BigInteger, nullable=False),  # 0: never run
    Column("run_by", String(64), nullable=True),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "check_name"),
)
