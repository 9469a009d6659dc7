"""The lifecycle's one table of its own: `work_faults`, one row per fault a worker round met on an
item (`lifecycle.faults`). The fault itself (the job, the error, the item and its status) is the
item's `<object>.faulted` note in the audit log, whose id the row carries; the row is there to be
counted (`paycore_worker_item_faults_total{job}` reads them at scrape time, from any process)
without reading the audit log. Written once, never updated, as `invariant_violations` is.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column, PrimaryKeyConstraint, String, Table

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

JOB_LENGTH: Final = 48  # a worker job's name (`send_payouts`)

work_faults = Table(
    "work_faults",
    metadata,
    tenant_id_column(),
    Column("event_id", String(ID_LENGTH), nullable=False),  # the item's `<object>.faulted` note
    Column("job", String(JOB_LENGTH), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "event_id"),
)
